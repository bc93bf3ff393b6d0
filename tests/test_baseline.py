"""The baseline on real ONNX Runtime and MNN: reference, fp16 floor, MNN-CPU gate, .mnn and QDQ models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_debug.baseline import BaselineResult, gate_report, load_baseline, run_baseline
from qnn_debug.errors import BadInputError
from qnn_debug.examples import quantize_for_qnn, single_op_model, small_cnn
from qnn_debug.onnx_graph import nodes_in_order
from qnn_debug.progress import Progress, ProgressEvent
from qnn_debug.runstore import Run, RunRecord, RunWriter, load_run


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BaselineResult, list[ProgressEvent]]:
    tmp = tmp_path_factory.mktemp("small")
    model = tmp / "small.onnx"
    onnx.save(small_cnn(), str(model))
    events: list[ProgressEvent] = []
    return model, run_baseline(model, tmp / "base", progress=Progress(events.append)), events


@pytest.fixture(scope="module")
def cls_baseline(ppocr_cls: Path, tmp_path_factory: pytest.TempPathFactory) -> BaselineResult:
    return run_baseline(ppocr_cls, tmp_path_factory.mktemp("cls") / "base", shapes={"x": [1, 3, 48, 192]})


@pytest.fixture(scope="module")
def det_baseline(ppocr_det: Path, tmp_path_factory: pytest.TempPathFactory) -> BaselineResult:
    return run_baseline(ppocr_det, tmp_path_factory.mktemp("det") / "base", shapes={"x": [1, 3, 64, 64]})


def test_small_baseline_layout_and_round_trip(small: tuple[Path, BaselineResult, list[ProgressEvent]]) -> None:
    model_path, result, events = small
    out = Path(result.out)
    assert {p.name for p in out.iterdir()} >= {"reference", "fp16_floor", "mnn_cpu", "inputs.npz", "baseline.json"}
    base = load_baseline(out)
    assert base.report == result.report and base.inputs_path == out / "inputs.npz"
    assert base.mnn_cpu is not None and base.floor is not None
    assert (out / "mnn_cpu" / "model.mnn").stat().st_size > 0
    ref = base.reference
    assert ref.record.target == "ort-cpu" and ref.record.role == "reference" and ref.record.precision == "fp32"
    assert ref.record.model is not None and ref.record.model.format == "onnx"
    # every node output, in ONNX execution order, with its producer; the graph input first
    order = {n.outputs[0]: n for n in nodes_in_order(onnx.load(str(model_path)))}
    assert [t.name for t in ref.iter_in_order()] == ["x", "c1", "r1", "c2", "y"]
    x = ref.info("x")
    assert (x.kind, x.position, x.op) == ("input", -1, None)
    for t in ref.tensors[1:]:
        assert (t.op, t.op_type, t.position) == (order[t.name].name, order[t.name].op_type, order[t.name].position)
    assert ref.info("y").kind == "output" and ref.record.outputs == ["y"]
    # inputs.npz is exactly what every run was fed and hashed
    saved = np.load(base.inputs_path)
    assert np.array_equal(saved["x"], ref.array("x"))
    for run in (ref, base.floor, base.mnn_cpu):
        assert run.record.inputs is not None and run.record.inputs.sha256 == result.report.inputs.sha256
    # tensor files are memory-mapped .npy and agree with a fresh ORT run of the model
    assert isinstance(ref.array("c2"), np.memmap)
    # progress reached the caller for every step
    stages = {e.stage for e in events if e.finished}
    assert {"ort-cpu: run", "fp16-floor: run", "mnn-cpu: run", "baseline: gate"} <= stages


def test_floor_is_fp16_level_and_fp16_representable(small: tuple[Path, BaselineResult, list[ProgressEvent]]) -> None:
    base = load_baseline(small[1].out)
    assert base.floor is not None
    for t in base.reference.tensors:
        ref, floor = np.asarray(base.reference.array(t.name)), np.asarray(base.floor.array(t.name))
        assert np.array_equal(floor, floor.astype(np.float16).astype(np.float32)), t.name
        assert 1e-5 < rel(floor, ref) < 5e-3, t.name  # rounded, but only at fp16 level (measured 2e-4..6e-4)


def test_small_gate_passes_with_numbers(small: tuple[Path, BaselineResult, list[ProgressEvent]]) -> None:
    report = small[1].report
    assert report.trusted and report.gate.status == "passed" and report.sentence.startswith("Trusted")
    assert report.gate.max_rel_error is not None and report.gate.max_rel_error < 1e-5  # measured 1.5e-7..2e-7
    (out,) = report.gate.outputs
    assert out.name == "y" and out.floor_rel_error is not None and out.floor_rel_error > 1e-4
    assert report.gate.worst_tensor in {"r1", "c2", "y"} and report.gate.compared_tensors >= 3


def test_ppocr_cls_gate(cls_baseline: BaselineResult) -> None:
    report = cls_baseline.report
    assert report.trusted, report.sentence
    # measured: 2.4e-7 on the output, worst shared tensor ~5e-6 over 110 tensors
    assert report.gate.max_rel_error is not None and report.gate.max_rel_error < 1e-4
    assert report.gate.compared_tensors > 100
    assert cls_baseline.tensors["reference"] == cls_baseline.tensors["fp16_floor"] > 200
    base = load_baseline(cls_baseline.out)
    assert base.floor is not None
    out = base.reference.record.outputs[0]
    floor_rel = rel(base.floor.array(out), np.asarray(base.reference.array(out)))
    assert 1e-5 < floor_rel < 2e-2  # fp16 level (measured 2.6e-4)


def test_ppocr_det_gate(det_baseline: BaselineResult) -> None:
    report = det_baseline.report
    assert report.trusted, report.sentence
    (out,) = report.gate.outputs
    # the synthetic text page makes the map non-trivial; MNN vs ORT measured 6.6e-4 at 96x96
    assert out.ref_max_abs > 0.5
    assert out.rel_error is not None and out.rel_error < out.limit <= 1e-2
    assert out.floor_rel_error is not None and out.floor_rel_error > out.rel_error


def test_mnn_model_uses_mnn_cpu_as_reference(small: tuple[Path, BaselineResult, list[ProgressEvent]], tmp_path: Path) -> None:
    onnx_base = load_baseline(small[1].out)
    mnn_model = Path(small[1].out) / "mnn_cpu" / "model.mnn"
    result = run_baseline(mnn_model, tmp_path / "mnnbase", inputs=onnx_base.inputs_path)
    report = result.report
    assert report.model_format == "mnn" and report.reference == "mnn-cpu" and report.gate.status == "not_applicable"
    assert report.floor.startswith("not built") and "Reshape" in report.floor
    base = load_baseline(result.out)
    assert base.floor is None and base.mnn_cpu is None
    ref = base.reference
    assert ref.record.target == "mnn-cpu" and ref.record.model is not None and ref.record.model.format == "mnn"
    assert ref.record.model.inputs[0].name == "x" and ref.record.outputs == ["y"]
    y = np.asarray(ref.array("y")).reshape(-1)
    assert rel(y, np.asarray(onnx_base.reference.array("y")).reshape(-1)) < 1e-5


def _qdq_model(tmp: Path) -> Path:
    onnx.save(small_cnn(), str(tmp / "f.onnx"))
    return Path(quantize_for_qnn(str(tmp / "f.onnx"), str(tmp / "q.onnx")))


def test_qdq_baseline_is_fake_quant(tmp_path: Path) -> None:
    result = run_baseline(_qdq_model(tmp_path), tmp_path / "qbase")
    report = result.report
    assert report.qdq_model and report.reference == "ort-cpu fake-quant" and report.gate.status == "not_applicable"
    assert report.trusted and "fake-quant" in report.sentence
    ref = load_baseline(result.out).reference
    assert ref.record.precision == "fp32-fakequant"
    # quantized activations are stored dequantized under the float name, with their integers
    r1 = ref.info("r1")
    assert r1.quant is not None and r1.target_name and r1.target_name != "r1" and r1.quant.raw_dtype == "uint8"
    assert r1.quant.offset == 0  # after a Relu the quantizer picks zero point 0
    raw = np.asarray(ref.raw("r1"))
    assert np.allclose(ref.array("r1"), (raw.astype(np.int64) + np.asarray(r1.quant.offset)) * r1.quant.scale)


def test_gate_skipped_is_not_trusted(small: tuple[Path, BaselineResult, list[ProgressEvent]], tmp_path: Path) -> None:
    result = run_baseline(small[0], tmp_path / "nogate", mnn_gate=False)
    assert not result.report.trusted and result.report.gate.status == "skipped"
    assert "not run" in result.report.sentence and not (tmp_path / "nogate" / "mnn_cpu").exists()


def _run(tmp: Path, name: str, arrays: dict[str, np.ndarray], role: str = "reference") -> Run:
    w = RunWriter(tmp / name, RunRecord(role=role, target=name, precision="fp32", outputs=["y"]))  # type: ignore[arg-type]
    for k, v in arrays.items():
        w.add_tensor(k, v, kind="output" if k == "y" else "activation", position=0 if k == "a" else 1)
    return w.finish()


def test_gate_fails_when_implementations_disagree_beyond_the_floor(tmp_path: Path) -> None:
    y = np.linspace(1, 2, 100, dtype=np.float32)
    ref = _run(tmp_path, "ref", {"a": y, "y": y})
    mnn = _run(tmp_path, "mnn", {"a": y, "y": y * (1 + 1e-3)}, "mnn_cpu")
    floor = _run(tmp_path, "floor", {"a": y, "y": y * (1 + 2e-3)}, "fp16_floor")
    gate = gate_report(ref, mnn, floor)
    assert gate.status == "failed" and gate.worst_tensor == "y"
    (out,) = gate.outputs
    assert out.limit == pytest.approx(2e-4, rel=1e-3) and out.rel_error == pytest.approx(1e-3, rel=1e-2)
    assert gate_report(ref, _run(tmp_path, "mnn2", {"y": y * (1 + 1e-5)}, "mnn_cpu"), floor).status == "passed"


def test_nan_output_is_not_trusted(tmp_path: Path) -> None:
    """Log of negative inputs: both implementations give NaN, which no comparison can trust."""
    onnx.save(single_op_model("Log", [1, 4]), str(tmp_path / "log.onnx"))
    np.savez(tmp_path / "neg.npz", x=-np.ones((1, 4), np.float32))
    report = run_baseline(tmp_path / "log.onnx", tmp_path / "b", inputs=tmp_path / "neg.npz").report
    assert not report.trusted and report.gate.status == "failed" and "NaN" in report.sentence


def test_out_dir_rules(small: tuple[Path, BaselineResult, list[ProgressEvent]], tmp_path: Path) -> None:
    model = small[0]
    out = tmp_path / "b"
    run_baseline(model, out, mnn_gate=False)
    first = json.loads((out / "baseline.json").read_text())["created_at"]
    with pytest.raises(BadInputError, match="not empty"):
        run_baseline(model, out, mnn_gate=False)
    again = run_baseline(model, out, force=True, seed=5, mnn_gate=False)
    assert again.report.inputs.source == "random:seed=5" and load_run(out / "reference").record.inputs is not None
    assert json.loads((out / "baseline.json").read_text())["created_at"] >= first
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(BadInputError, match="does not look like"):
        run_baseline(model, foreign, force=True)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_bad_models_and_dirs(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        run_baseline(tmp_path / "missing.onnx", tmp_path / "o")
    (tmp_path / "m.tflite").write_bytes(b"x")
    with pytest.raises(BadInputError, match="cannot tell the format"):
        run_baseline(tmp_path / "m.tflite", tmp_path / "o")
    (tmp_path / "bad.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(BadInputError, match="not a readable ONNX model"):
        run_baseline(tmp_path / "bad.onnx", tmp_path / "o2")
    with pytest.raises(BadInputError, match=r"no baseline\.json"):
        load_baseline(tmp_path)
    with pytest.raises(BadInputError, match="does not exist"):
        load_baseline(tmp_path / "nothing")
