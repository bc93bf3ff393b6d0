"""compare on bad or mismatched inputs: clear errors (exit 2) or explicit rows, never a crash.

Targets here are ``.npz`` files built from real ONNX Runtime runs (the reference itself, or the model
edited with ``qnn_debug.inject`` and run on ORT CPU), so every case has a known answer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from compare_models import mixed_ops_net
from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.errors import BadInputError
from qnn_debug.examples import small_cnn
from qnn_debug.inject import inject
from qnn_debug.onnx_graph import mark_all
from qnn_debug.runstore import load_run

runner = CliRunner()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("compare_inputs")
    onnx.save(small_cnn(), str(d / "cnn.onnx"))
    onnx.save(mixed_ops_net(), str(d / "mixed.onnx"))
    run_baseline(d / "cnn.onnx", d / "cnn_base", mnn_gate=False)
    run_baseline(d / "mixed.onnx", d / "mixed_base", mnn_gate=False)
    return d


def reference_arrays(base: Path) -> dict[str, np.ndarray]:
    run = load_run(base / "reference")
    return {t.name: np.array(run.array(t.name)) for t in run.tensors}


def cpu_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(mark_all(model).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def compare_cli(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["compare", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_empty_corrupt_and_single_array_npz_are_clear_errors(work: Path):
    empty = work / "empty.npz"
    np.savez(empty)
    code, doc = compare_cli(str(work / "cnn_base"), str(empty))
    assert code == 2 and doc["error"] == "bad_input" and "holds no arrays" in doc["message"]
    corrupt = work / "corrupt.npz"
    corrupt.write_bytes(b"not a zip file at all")
    code, doc = compare_cli(str(work / "cnn_base"), str(corrupt))
    assert code == 2 and "not a readable .npz" in doc["message"]
    single = work / "single.npz"
    with open(single, "wb") as f:
        np.save(f, np.zeros(3))
    code, doc = compare_cli(str(work / "cnn_base"), str(single))
    assert code == 2 and "single array" in doc["message"]


def test_wrong_model_and_foreign_paths_are_clear_errors(work: Path):
    code, doc = compare_cli(str(work / "cnn_base"), str(work / "mixed_base" / "reference"))
    assert code == 2 and "none of the" in doc["message"] and "same model" in doc["hint"]
    code, doc = compare_cli(str(work / "cnn_base"), str(work / "cnn_base" / "reference"), "--model", str(work / "mixed.onnx"))
    assert code == 2 and "not the model the reference was built from" in doc["message"]
    code, doc = compare_cli(str(work), str(work / "cnn_base" / "reference"))
    assert code == 2 and "neither a baseline" in doc["message"]
    code, doc = compare_cli(str(work / "cnn_base"), str(work / "nowhere"))
    assert code == 2 and "does not exist" in doc["message"]


def test_missing_renamed_and_misshapen_tensors_become_rows(work: Path):
    arrays = reference_arrays(work / "cnn_base")
    target = {"x": arrays["x"], "c1": np.ascontiguousarray(arrays["c1"].transpose(0, 2, 3, 1)),  # NHWC dump
              "r1": arrays["r1"][:, :8], "y": arrays["y"].reshape(1, 16), "extra_stage": np.ones(4, np.float32)}
    np.savez(work / "partial.npz", **target)
    result = compare_paths(work / "cnn_base", work / "partial.npz")
    rows = {r.name: r for r in result.tensors}
    assert rows["c1"].layout == "nhwc" and rows["c1"].metrics["sqnr_db"] == 200.0
    assert rows["y"].layout == "reshape"
    unaligned = {u.name: u for u in result.unaligned}
    assert "shape mismatch" in unaligned["r1"].reason and unaligned["r1"].side == "reference"
    assert "not in the target" in unaligned["c2"].reason
    assert unaligned["extra_stage"].side == "target"
    assert result.verdict.kind == "ok" and result.first_failing is None and result.target_kind == "npz"


def test_nan_everywhere_is_a_bug_at_the_first_op(work: Path):
    arrays = reference_arrays(work / "cnn_base")
    target = {k: (v if k == "x" else np.full_like(v, np.nan)) for k, v in arrays.items()}
    np.savez(work / "nan.npz", **target)
    result = compare_paths(work / "cnn_base", work / "nan.npz")
    assert result.verdict.kind == "real_bug" and result.verdict.pattern == "nan_inf"
    assert result.first_failing is not None and result.first_failing.op == "conv1"
    assert {r.name: r.metrics["nan"] for r in result.tensors}["c1"] == arrays["c1"].size


def test_target_on_other_inputs_is_refused_but_zeroed_input_is_a_verdict(work: Path):
    arrays = reference_arrays(work / "cnn_base")
    other_x = np.random.default_rng(99).standard_normal(arrays["x"].shape).astype(np.float32)
    np.savez(work / "other_input.npz", **cpu_run(small_cnn(), {"x": other_x}), x=other_x)
    with pytest.raises(BadInputError, match="different input 'x'"):
        compare_paths(work / "cnn_base", work / "other_input.npz")
    zero_x = np.zeros_like(arrays["x"])
    np.savez(work / "zero_input.npz", **cpu_run(small_cnn(), {"x": zero_x}), x=zero_x)
    result = compare_paths(work / "cnn_base", work / "zero_input.npz")
    assert result.verdict.kind == "input_not_copied" and result.verdict.pattern == "zero_input"


def test_bug_inside_a_segment_the_target_did_not_dump(work: Path):
    # The target dumped no Resize output: the suspect is conv2, re-run together with the resize,
    # and the coordinate-mode test pins the Resize inside that segment.
    arrays = reference_arrays(work / "mixed_base")
    buggy = cpu_run(inject(mixed_ops_net(), "resize_coordinates", "resize"), {"x": arrays["x"]})
    target = {k: v for k, v in buggy.items() if k in arrays and k != "rs"}
    np.savez(work / "fused.npz", x=arrays["x"], **target)
    result = compare_paths(work / "mixed_base", work / "fused.npz")
    ff = result.first_failing
    assert result.verdict.kind == "real_bug" and result.verdict.pattern == "wrong_coordinates"
    assert ff is not None and ff.op == "resize" and ff.tensor == "rs"
    assert ff.local_error is not None and ff.local_error.segment == ["resize", "conv2"]
    assert any(u.name == "rs" for u in result.unaligned)


def test_json_file_option_never_overwrites_other_files(work: Path):
    arrays = reference_arrays(work / "cnn_base")
    np.savez(work / "same.npz", **arrays)
    keep = work / "keep.npz"
    shutil.copy(work / "same.npz", keep)
    before = keep.read_bytes()
    result = runner.invoke(app, ["compare", str(work / "cnn_base"), str(work / "same.npz"), "--json", str(keep)])
    assert result.exit_code == 2 and keep.read_bytes() == before
    out = work / "result.json"
    result = runner.invoke(app, ["compare", str(work / "cnn_base"), str(work / "same.npz"), "--json", str(out)])
    assert result.exit_code == 0 and "verdict: ok" in result.stdout
    assert json.loads(out.read_text())["verdict"]["kind"] == "ok"
    # a bare --json before the positionals still means stdout
    result = runner.invoke(app, ["compare", "--json", str(work / "cnn_base"), str(work / "same.npz")])
    assert result.exit_code == 0 and json.loads(result.stdout)["verdict"]["kind"] == "ok"


def test_without_model_or_floor_the_verdict_says_how_sure_it_is(work: Path, tmp_path: Path):
    # A baseline whose model file has since been deleted: no op can be re-run on CPU.
    shutil.copy(work / "cnn.onnx", tmp_path / "gone.onnx")
    run_baseline(tmp_path / "gone.onnx", tmp_path / "base", mnn_gate=False)
    buggy = cpu_run(inject(small_cnn(), "conv_on_zeros", "conv2"), {"x": reference_arrays(tmp_path / "base")["x"]})
    np.savez(tmp_path / "bug.npz", **buggy)
    (tmp_path / "gone.onnx").unlink()
    result = compare_paths(tmp_path / "base", tmp_path / "bug.npz")
    assert result.verdict.kind == "real_bug" and result.verdict.confidence < 0.5
    assert result.first_failing is not None and result.first_failing.op == "conv2"
    assert result.first_failing.local_error is None
    assert any("no longer exists" in w for w in result.warnings)
    # given the model again, the op is re-run and the pattern found
    full = compare_paths(tmp_path / "base", tmp_path / "bug.npz", model=work / "cnn.onnx")
    assert full.verdict.kind == "real_bug" and full.verdict.pattern == "zero_input" and full.verdict.confidence > 0.9
    # a lone reference run (no fp16 floor next to it) still compares, against a fixed fp16 level
    shutil.copytree(tmp_path / "base" / "reference", tmp_path / "lone" / "reference")
    lone = compare_paths(tmp_path / "lone" / "reference", tmp_path / "bug.npz", model=work / "cnn.onnx")
    assert lone.floor is None and lone.first_failing is not None and lone.first_failing.op == "conv2"
    assert all(r.floor_metrics is None for r in lone.tensors)


def test_no_local_option_skips_the_re_run(work: Path, tmp_path: Path):
    buggy = cpu_run(inject(small_cnn(), "scale_output", "relu1", factor=0.5), {"x": reference_arrays(work / "cnn_base")["x"]})
    np.savez(tmp_path / "scaled.npz", **buggy)
    code, doc = compare_cli(str(work / "cnn_base"), str(tmp_path / "scaled.npz"), "--no-local")
    assert code == 0 and doc["counts"]["local_checks"] == 0 and doc["first_failing"]["op"] == "relu1"
    code, doc = compare_cli(str(work / "cnn_base"), str(tmp_path / "scaled.npz"))
    assert doc["verdict"]["pattern"] == "scale_shift" and doc["verdict"]["evidence"]["pattern_details"]["scale"] == 0.5
