"""What a user reads after a comparison: help texts, inputs for diagnose, coherent numbers, next steps.

Regression tests for acceptance findings C4 (``[default: …]`` eaten by rich markup in ``--help``), C5
(``diagnose --inputs`` refusing an MNN test dir), C6 (a QDQ diagnosis that called the 200 dB cap the floor
and mixed number precisions) and C8 (no next step after a ``precision`` verdict). Everything runs for real:
ONNX Runtime, the HTP simulator and the CLI through ``CliRunner``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import typer
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from next_steps_check import argv as step_argv
from next_steps_check import check_steps
from next_steps_check import text as steps_text
from qnn_debug.cli import app
from qnn_debug.compare import fmt
from qnn_debug.compare.metrics import SQNR_CAP_DB
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.compare.schema import CompareResult
from qnn_debug.diagnose import diagnose
from qnn_debug.examples import deep_conv_net, quantize_for_qnn, small_cnn
from qnn_debug.inject import inject
from qnn_debug.mnn.testdir_builder import write_testdir
from qnn_debug.onnx_graph import graph_inputs, mark_all

REPO = Path(__file__).resolve().parents[1]
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}  # one line per option, so texts can be matched whole
TWO_DECIMALS_DB = re.compile(r"\d+\.\d{2,} dB")  # "39.5525 dB": dB must read with one decimal
runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=WIDE)
    return result.exit_code, result.stdout


def _flat(text: str) -> str:
    """Rendered help without the box drawing, whitespace collapsed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


# --- C4: every option's help text survives rendering ---------------------------------------------------------

@pytest.mark.parametrize("name", COMMANDS)
def test_every_help_text_is_shown_whole(name: str) -> None:
    assert {"baseline", "dump", "compare", "diagnose", "run", "testdir", "probe", "devices", "import-dump", "op",
            "triage", "toggle-shape-mutable", "demo"} <= set(COMMANDS)
    group = typer.main.get_command(app)
    command = group.commands[name]  # type: ignore[attr-defined]
    code, out = _cli(name, "--help")
    assert code == 0
    shown = _flat(out)
    texts = [(p.name, getattr(p, "help", None)) for p in command.params]
    texts.append(("(command)", (command.help or "").split("\n\n")[0]))
    for what, text in texts:
        if text:
            assert " ".join(text.split()) in shown, f"{name} {what}: rich markup ate part of {text!r}"
    if name == "diagnose":
        assert "(default: qnn-debug-runs/MODEL/diagnose-TARGET)" in shown


# --- C5: diagnose takes an MNN test dir as --inputs, like baseline and dump -----------------------------------

def test_diagnose_takes_an_mnn_test_dir_as_inputs(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model))
    spec = graph_inputs(onnx.load(str(model)))[0]
    x = np.random.default_rng(5).random([int(d) for d in spec.shape]).astype(np.float32)  # type: ignore[arg-type]
    td = write_testdir(tmp_path / "td", {spec.name: x}, [], shape_mutable=False)
    out = tmp_path / "diag"
    code, text = _cli("diagnose", str(model), "--inputs", td.dir, "--no-mnn-gate", "--out", str(out), "--json")
    assert code == 0, text
    doc = json.loads(text)
    assert doc["compare"]["verdict"]["kind"] in ("ok", "precision")
    for run in ("baseline/reference", "htp-sim"):  # both runs read the test dir itself and say so
        assert json.loads((out / run / "run.json").read_text())["inputs"]["source"] == "testdir:td"
    np.testing.assert_allclose(np.load(out / "baseline" / "inputs.npz")[spec.name], x, rtol=1e-6, atol=0)


def test_diagnose_refuses_a_plain_directory_before_running_anything(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model))
    (tmp_path / "plain").mkdir()
    out = tmp_path / "diag"
    code, text = _cli("diagnose", str(model), "--inputs", str(tmp_path / "plain"), "--out", str(out), "--json")
    doc = json.loads(text)
    assert code == 2 and doc["error"] == "bad_input" and "is a directory" in doc["message"]
    assert "test dir" in doc["hint"] and "does not exist" not in doc["message"]
    assert not (out / "baseline").exists() and not (out / "htp-sim").exists()


# --- C6: a QDQ model's diagnosis reads coherently --------------------------------------------------------------

@pytest.fixture(scope="module")
def qdq_diagnosis(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``qnn-debug diagnose dcn_qdq.onnx --target htp-sim --precision quantized`` on a QDQ deep conv net."""
    d = tmp_path_factory.mktemp("qdq")
    onnx.save(deep_conv_net(blocks=6), str(d / "dcn.onnx"))
    quantize_for_qnn(str(d / "dcn.onnx"), str(d / "dcn_qdq.onnx"))
    code, text = _cli("diagnose", str(d / "dcn_qdq.onnx"), "--target", "htp-sim", "--precision", "quantized",
                      "--no-mnn-gate", "--out", str(d / "diag"))
    assert code == 0, text
    return d / "diag", text


def test_quantized_diagnosis_never_presents_the_cap_as_a_floor(qdq_diagnosis: tuple[Path, str]) -> None:
    out, text = qdq_diagnosis
    md = (out / "report" / "compare.md").read_text()
    result = CompareResult.model_validate_json((out / "report" / "compare.json").read_text())
    assert result.verdict.kind == "quantization"
    exact = [r for r in result.tensors if (r.floor_metrics or {}).get("sqnr_db") == SQNR_CAP_DB and r.excess_db]
    assert exact, "the QDQ floor is exact at quantized tensors: the case the acceptance test found"
    for doc in (text, md, result.verdict.summary):
        assert "200.0" not in doc and "beyond the floor" not in doc
        assert not TWO_DECIMALS_DB.findall(doc), TWO_DECIMALS_DB.findall(doc)
    assert "dB below the 60 dB fp16 level (the floor is exact)" in text
    assert "the quantization step is the yardstick" in result.verdict.summary
    assert "Quantized target:" in text and "Quantized target:" in md
    # JSON keeps the measurements at full precision
    assert any(round(r.metrics["sqnr_db"] or 0.0, 1) != r.metrics["sqnr_db"] for r in result.tensors)


def test_quantization_verdict_points_at_encodings(qdq_diagnosis: tuple[Path, str]) -> None:
    out, text = qdq_diagnosis
    result = CompareResult.model_validate_json((out / "report" / "compare.json").read_text())
    worst = result.verdict.evidence["worst_excess"]["tensor"]
    assert any("encodings" in s.why and worst in s.why for s in result.next_steps)
    assert "next steps:" in text
    _check_steps(result.next_steps)


def test_text_helpers_keep_one_convention() -> None:
    assert fmt.SQNR_CAP_DB == SQNR_CAP_DB
    assert (fmt.db(47.088), fmt.db(56.3242), fmt.db(SQNR_CAP_DB), fmt.db(-SQNR_CAP_DB)) == ("47.1", "56.3", "exact", "−∞")
    assert fmt.observer(SQNR_CAP_DB) == "identical" and fmt.rel(0.0116279) == "1.16e-02"
    assert fmt.shortfall(20.45, SQNR_CAP_DB, 60.0).startswith("20.4 dB below the 60 dB fp16 level (the floor is exact")
    assert fmt.shortfall(7.78, 53.64, 60.0) == "7.8 dB below the fp16 floor (53.6 dB)"


# --- C8: next steps that name real commands --------------------------------------------------------------------

def _lut_net() -> onnx.ModelProto:
    """x → Conv (bias -10) → BatchNorm → Sigmoid → ×1000: HTP's Sigmoid LUT (absolute floor ~2.4e-4, exact 0
    below about -9) is fine on its own, but the scale makes the output lose everything — precision, no wrong op."""
    rng = np.random.default_rng(0)

    def init(name: str, value: np.ndarray | float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    c = 8
    inits = [init("w", rng.standard_normal((c, 3, 3, 3)) * 0.05), init("b", np.full(c, -10.0)), init("g", np.ones(c)),
             init("beta", np.zeros(c)), init("mean", np.zeros(c)), init("var", np.ones(c)), init("k", 1000.0)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["bn"], name="bn"),
             helper.make_node("Sigmoid", ["bn"], ["s"], name="sigmoid"),
             helper.make_node("Mul", ["s", "k"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "lut_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="qnn-debug-tests")
    model.ir_version = 9
    return model


def _commands(steps: list[Any]) -> list[list[str]]:
    return [step_argv(s) for s in steps]


def _check_steps(steps: list[Any]) -> None:
    """Every command is a real subcommand with real options; every tool an MCP tool; every playbook a file."""
    check_steps(steps)


def test_precision_verdict_suggests_fusions_and_the_unmarked_outputs_and_they_run(tmp_path: Path) -> None:
    model = tmp_path / "lut.onnx"
    onnx.save(_lut_net(), str(model))
    out = tmp_path / "diag"
    code, text = _cli("diagnose", str(model), "--no-mnn-gate", "--out", str(out), "--json")
    assert code == 0, text
    compare = json.loads(text)["compare"]
    assert compare["verdict"]["kind"] == "precision" and compare["first_failing"] is None
    steps: list[dict[str, Any]] = compare["next_steps"]
    joined = steps_text(steps)
    assert "disabled_optimizers=ConvBNFusion" in joined and "unmarked_outputs.npz" in joined
    assert "observer effect" in joined.lower() and "playbooks/wrong-numbers.md" in joined
    assert any(s["tool"] == "dump_qnn" and "disabled_optimizers=ConvBNFusion" in s["cli"] for s in steps)
    assert any(s["tool"] == "compare" and s["cli"].endswith("unmarked_outputs.npz") for s in steps)
    _check_steps(steps)
    md = (out / "report" / "compare.md").read_text()
    assert "**Next steps**" in md and "disabled_optimizers=ConvBNFusion" in md
    # the commands are not just well-formed: each one runs as printed
    for argv in _commands(steps):
        code, printed = _cli(*argv[1:])
        assert code == 0, (argv, printed)
    unmarked = compare_paths(out / "baseline", out / "htp-sim" / "unmarked_outputs.npz")
    assert [r.name for r in unmarked.tensors] == ["y"]


def test_real_bug_verdict_suggests_the_op_probe_and_the_playbook(tmp_path: Path) -> None:
    original, edited = tmp_path / "cnn.onnx", tmp_path / "cnn_bug.onnx"
    onnx.save(small_cnn(), str(original))
    onnx.save(inject(small_cnn(), "conv_on_zeros", "conv2"), str(edited))
    result = diagnose(edited, tmp_path / "diag", reference_model=original, mnn_gate=False).compare
    assert result.verdict.kind == "real_bug"
    probe = next(s for s in result.next_steps if s.tool == "lookup_op_constraints")
    assert probe.cli.startswith("qnn-debug op Conv --probe --shape ") and "--attr pads=1,1,1,1" in probe.cli, probe.cli
    assert result.warnings[0].startswith("the target ran cnn_bug.onnx, not the reference's cnn.onnx")
    assert any("playbooks/wrong-numbers.md" in s.why and "zero_input" in s.why for s in result.next_steps)
    _check_steps(result.next_steps)


def test_input_not_copied_verdict_suggests_shape_mutable_false(tmp_path: Path) -> None:
    from qnn_debug.baseline import run_baseline

    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model))
    run_baseline(model, tmp_path / "base", mnn_gate=False)
    x = np.zeros_like(np.load(tmp_path / "base" / "inputs.npz")["x"])
    sess = ort.InferenceSession(mark_all(small_cnn()).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    np.savez(tmp_path / "zero.npz", x=x, **dict(zip(names, sess.run(None, {"x": x}), strict=True)))
    code, text = _cli("compare", str(tmp_path / "base"), str(tmp_path / "zero.npz"), "--report", str(tmp_path / "rep"))
    assert code == 0 and "verdict: input_not_copied" in text
    assert 'toggle-shape-mutable "$TESTDIR" --value false' in text and "playbooks/shape-mutable.md" in text
    assert "set TESTDIR to the MNN test dir the run used" in text
    result = CompareResult.model_validate_json((tmp_path / "rep" / "compare.json").read_text())
    assert "**Next steps**" in (tmp_path / "rep" / "compare.md").read_text()
    _check_steps(result.next_steps)


def test_healthy_runs_have_no_next_steps_and_json_names_are_unchanged(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model))
    result = diagnose(model, tmp_path / "diag", mnn_gate=False).compare
    assert result.verdict.kind in ("ok", "precision")
    doc = json.loads((tmp_path / "diag" / "report" / "compare.json").read_text())
    assert {"first_failing", "verdict", "tensors", "observer_effect_db", "unaligned", "next_steps"} <= set(doc)
    assert set(doc["verdict"]) == {"kind", "pattern", "confidence", "summary", "evidence"}
    if result.verdict.kind == "ok":
        assert doc["next_steps"] == []
