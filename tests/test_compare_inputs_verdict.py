"""compare when the inputs themselves are in question: other baseline data, NaN inputs, hidden shape misfits.

The MNN cases use the shared fixtures (dumps MNN's QNN backend wrote on the HTP simulator); the ``.npz``
targets are real ONNX Runtime runs of the project's small CNN, edited where a case needs a wrong tensor.
Every case goes through the CLI or ``compare_paths``: no engine piece is mocked.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.compare import fmt
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.errors import BadInputError
from qnn_debug.examples import small_cnn
from qnn_debug.runstore import load_run

runner = CliRunner()
DUMPS = ["online_fp16", "offline_fp16", "online_fp32"]


def compare_cli(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["compare", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def mnn_bases(mnn_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Baselines of the fixture model: on random inputs, on the dump's input (.npz) and on the test dir."""
    d = tmp_path_factory.mktemp("inputs_verdict_mnn")
    model = mnn_fixtures / "testdir" / "test.onnx"
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    np.savez(d / "in.npz", x=x)
    run_baseline(model, d / "rand", mnn_gate=False)
    run_baseline(model, d / "npz", inputs=d / "in.npz", mnn_gate=False)
    run_baseline(model, d / "testdir", inputs=mnn_fixtures / "testdir", mnn_gate=False)
    return {"rand": d / "rand", "npz": d / "npz", "testdir": d / "testdir"}


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("inputs_verdict_cnn")
    onnx.save(small_cnn(), str(d / "cnn.onnx"))
    run_baseline(d / "cnn.onnx", d / "base", mnn_gate=False)
    return d


def reference_arrays(base: Path) -> dict[str, np.ndarray]:
    run = load_run(base / "reference")
    return {t.name: np.array(run.array(t.name)) for t in run.tensors}


def test_baseline_on_other_data_blames_the_input_not_a_downstream_op(mnn_fixtures: Path, mnn_bases: dict[str, Path]):
    # C1: a random-input baseline against a dump of the fixture input; the error starts at x, before any op.
    code, out = compare_cli(str(mnn_bases["rand"]), str(mnn_fixtures / "dumps" / "online_fp16"),
                            "--mnn-model", str(mnn_fixtures / "test.mnn"))
    assert code == 0
    v, ff = out["verdict"], out["first_failing"]
    assert (v["kind"], v["pattern"]) == ("input_not_copied", "none") and v["confidence"] == 0.6
    assert ff["op"] == "conv1" and ff["tensor"] == "c1" and ff["observed_as"] == "c1@ReluTensor"
    summary = v["summary"]
    assert "input 'x' (x@cast)" in summary and "SQNR 5.8 dB" in summary
    assert '--inputs "$INPUTS"` (MODEL: the model; INPUTS: the test dir or .npz the device used)' in summary
    assert "shapeMutable=true" in summary and not re.search(r"<[A-Za-z][^<>`]*>", summary)
    assert v["evidence"]["input_mismatch"]["observed_as"] == "x@cast"
    steps = out["next_steps"]
    assert steps[0]["tool"] == "baseline" and steps[0]["cli"].startswith("qnn-debug baseline")
    assert '--inputs "$TESTDIR"' in steps[0]["cli"] and "set TESTDIR to" in steps[0]["why"]
    assert steps[1]["tool"] == "compare" and steps[1]["cli"].startswith('qnn-debug compare "$NEW_BASELINE"')
    assert "--mnn-model" in steps[1]["cli"]
    assert steps[2]["tool"] == "toggle_shapeMutable" and "toggle-shape-mutable" in steps[2]["cli"]
    # the .mnn given with --mnn-model is named as given, not left as a "$MNN_MODEL" to fill in
    assert all("$MNN_MODEL" not in s["cli"] for s in steps), [s["cli"] for s in steps]
    assert str(mnn_fixtures / "test.mnn") in steps[1]["cli"] and str(mnn_fixtures / "test.mnn") in steps[3]["cli"]
    assert out["mnn_model"] == str(mnn_fixtures / "test.mnn")


@pytest.mark.parametrize("source", ["npz", "testdir"])
@pytest.mark.parametrize("dump", DUMPS)
def test_baseline_on_the_dump_input_keeps_every_fixture_dump_ok(mnn_fixtures: Path, mnn_bases: dict[str, Path],
                                                                source: str, dump: str):
    result = compare_paths(mnn_bases[source], mnn_fixtures / "dumps" / dump, mnn_model=mnn_fixtures / "test.mnn")
    assert result.verdict.kind == "ok", result.verdict.summary
    assert "input_mismatch" not in result.verdict.evidence


def test_constant_input_copy_is_input_not_copied_with_the_constant_pattern(mnn_fixtures: Path,
                                                                           mnn_bases: dict[str, Path], tmp_path: Path):
    # Test double: the real online fp16 dump with the backend's fp16 copy of x filled with 0.5.
    dump = tmp_path / "constant_input_cast_double"
    shutil.copytree(mnn_fixtures / "dumps" / "online_fp16", dump)
    raw = next(dump.glob("*_t0_cast.raw"))
    raw.write_bytes(np.full(raw.stat().st_size // 2, 0.5, np.float16).tobytes())
    result = compare_paths(mnn_bases["npz"], dump, mnn_model=mnn_fixtures / "test.mnn")
    assert (result.verdict.kind, result.verdict.pattern) == ("input_not_copied", "constant")
    assert "is constant (every value 0.5)" in result.verdict.summary
    assert result.first_failing is not None and result.first_failing.op == "conv1"


def test_npz_target_on_other_input_is_still_a_clear_error(cnn: Path):
    arrays = reference_arrays(cnn / "base")
    arrays["x"] = np.random.default_rng(5).standard_normal(arrays["x"].shape).astype(np.float32)
    np.savez(cnn / "other_x.npz", **arrays)
    code, out = compare_cli(str(cnn / "base"), str(cnn / "other_x.npz"))
    assert code == 2 and "different input 'x'" in out["message"] and "--inputs" in out["hint"]


def test_nan_input_is_named_as_nan_not_as_sqnr_none(cnn: Path):
    # C7
    arrays = reference_arrays(cnn / "base")
    arrays["x"] = np.full_like(arrays["x"], np.nan)
    np.savez(cnn / "nan_x.npz", **arrays)
    with pytest.raises(BadInputError, match=r"holds NaN/Inf \(\d+ of \d+ values\)") as e:
        compare_paths(cnn / "base", cnn / "nan_x.npz")
    assert "None" not in e.value.message


def test_local_error_from_reference_inputs_is_worded_as_such(cnn: Path):
    # C2: the target has no copy of x, so conv1's re-run takes x from the reference.
    arrays = reference_arrays(cnn / "base")
    target = {k: v for k, v in arrays.items() if k != "x"}
    target["c1"] = arrays["c1"] * 0.5 + 1.0
    np.savez(cnn / "no_x.npz", **target)
    code, out = compare_cli(str(cnn / "base"), str(cnn / "no_x.npz"))
    assert code == 0 and out["verdict"]["kind"] == "real_bug"
    assert out["first_failing"]["local_error"]["inputs"] == {"x": "reference"}
    assert "own inputs" not in out["verdict"]["summary"]
    assert "'x' taken from the reference" in out["verdict"]["summary"]
    text = runner.invoke(app, ["compare", str(cnn / "base"), str(cnn / "no_x.npz")]).stdout
    assert "own inputs" not in text and "cannot be separated" in text


def test_local_inputs_wording():
    assert fmt.local_inputs({"x": "target"}) == "on the target's own inputs"
    assert "'x' taken from the reference" in fmt.local_inputs({"x": "reference", "w": "target"})


@pytest.mark.parametrize("case", ["half_channels", "empty", "nan_only"])
def test_tensor_the_target_holds_but_cannot_be_compared_is_a_warning(cnn: Path, case: str):
    # C3: c2 is in the target, but misshapen, empty or all NaN; the verdict must not claim every tensor.
    arrays = reference_arrays(cnn / "base")
    ref_shape = list(arrays["c2"].shape)
    if case == "half_channels":
        arrays["c2"] = np.ascontiguousarray(arrays["c2"][:, : ref_shape[1] // 2])
    elif case == "empty":
        arrays["c2"] = np.zeros((0,), np.float32)
    else:
        arrays["c2"] = np.full_like(arrays["c2"], np.nan)
    np.savez(cnn / f"c2_{case}.npz", **arrays)
    code, out = compare_cli(str(cnn / "base"), str(cnn / f"c2_{case}.npz"))
    assert code == 0
    warn = [w for w in out["warnings"] if "'c2'" in w and "not compared" in w]
    assert warn, out["warnings"]
    v = out["verdict"]
    assert "every tensor" not in v["summary"]
    if case == "nan_only":  # all NaN is itself the fault, found at conv2
        assert "only NaN/Inf" in warn[0]
        assert (v["kind"], v["pattern"], out["first_failing"]["op"]) == ("real_bug", "nan_inf", "conv2")
        return
    assert str(list(arrays["c2"].shape)) in warn[0] and str(ref_shape) in warn[0]
    assert v["kind"] == "ok" and v["confidence"] <= 0.5 and "every compared tensor" in v["summary"]
    assert "'c2'" in v["summary"] and v["evidence"]["not_compared"]


def test_baseline_directory_as_target_says_which_run_to_pass(cnn: Path):
    # C9
    code, out = compare_cli(str(cnn / "base"), str(cnn / "base"))
    assert code == 2
    assert "is a baseline directory" in out["message"] and str(cnn / "base" / "reference") in out["message"]
    help_text = runner.invoke(app, ["compare", "--help"]).stdout
    assert "baseline" in help_text and "reference/" in help_text
