"""The MNN-CPU gate on models that compute in fp16: PP-OCR converted to fp16 (float16 weights and activations,
float32 I/O, BatchNormalization kept in fp32 between Casts, as fp16 converters do).

ONNX Runtime computes such a graph in fp16 and MNN CPU in fp32, so they differ by the model's own fp16 rounding;
the gate holds each tensor that rounding reaches to twice its size, measured on the graph lifted to fp32. It must
still fail an .mnn of another model. (The toy Qwen3 fp16 TorchScript exports: tests/test_real_export_torch.py.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qnn_debug.baseline import run_baseline
from qnn_debug.inputs import fix_input_shapes
from qnn_debug.onnx_fp16 import fp16_signs, lift_to_fp32
from qnn_debug_testkit.fp16_convert import to_fp16

SHAPES = {"cls": [1, 3, 48, 192], "rec": [1, 3, 48, 160]}


def _fp16(src: Path, kind: str, dst: Path) -> tuple[Path, Path]:
    """(the fp16 model, its inputs): PP-OCR at a fixed shape, converted to fp16."""
    model = to_fp16(fix_input_shapes(onnx.load(str(src)), {"x": SHAPES[kind]}))
    onnx.save(model, str(dst))
    x = np.random.default_rng(0).uniform(-1, 1, SHAPES[kind]).astype(np.float32)
    np.savez(dst.with_suffix(".npz"), x=x)
    return dst, dst.with_suffix(".npz")


@pytest.fixture(params=["cls", "rec"])
def ppocr_fp16(request: pytest.FixtureRequest, ppocr_cls: Path, ppocr_rec: Path, tmp_path: Path) -> tuple[Path, Path]:
    src = ppocr_cls if request.param == "cls" else ppocr_rec
    return _fp16(src, request.param, tmp_path / f"{request.param}_fp16.onnx")


def test_fp16_ppocr_is_trusted_under_the_fp16_limit(ppocr_fp16: tuple[Path, Path], tmp_path: Path) -> None:
    model, feeds = ppocr_fp16
    report = run_baseline(model, tmp_path / "b", inputs=feeds).report
    assert report.trusted, report.sentence
    (out,) = report.gate.outputs
    assert report.gate.arithmetic == "fp16" and out.limit_rule == "fp16", report.gate.limit_why
    assert out.rel_error is not None and out.rel_error > 1e-4  # beyond the fp32 rule's floor of 1e-4
    assert out.fp16_own_rel_error is not None and out.limit == pytest.approx(max(2.0 ** -11, 2 * out.fp16_own_rel_error))
    assert out.fp32_lift_rel_error is not None and out.fp32_lift_rel_error < 1e-4
    assert "float16 constants" in report.gate.limit_why and "fp16 limit" in report.sentence


def test_fp16_limit_fails_an_mnn_with_a_weight_off(ppocr_cls: Path, tmp_path: Path) -> None:
    """The user's .mnn of the same fp16 cls with one convolution's weights 5% off: MNN runs another model."""
    model, feeds = _fp16(ppocr_cls, "cls", tmp_path / "cls_fp16.onnx")
    bad = onnx.load(str(model))
    conv = [n for n in bad.graph.node if n.op_type == "Conv"][20]
    const = next(n for n in bad.graph.node if n.output[0] == conv.input[1])
    w = numpy_helper.to_array(const.attribute[0].t)
    const.attribute[0].t.CopyFrom(numpy_helper.from_array((w.astype(np.float32) * 1.05).astype(np.float16)))
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    mnn = tmp_path / "bad.mnn"
    shutil.copy(Path(run_baseline(tmp_path / "bad.onnx", tmp_path / "bad", inputs=feeds).out) / "mnn_cpu" / "model.mnn",
                mnn)
    report = run_baseline(model, tmp_path / "gate", inputs=feeds, mnn_model=mnn).report
    assert report.trusted and report.mnn_model is not None
    gate = report.mnn_model.gate
    (out,) = gate.outputs
    assert gate.status == "failed" and out.limit_rule == "fp16", gate
    assert "disagrees with ONNX Runtime" in report.sentence


def test_fp16_signs_and_lift_on_real_graphs(ppocr_cls: Path, tmp_path: Path) -> None:
    """Read from the graph, never names: the fp32 model has none; its fp16 conversion's lift has none either and
    computes what the fp32 graph computes from the fp16-rounded weights."""
    fp32 = onnx.load(str(ppocr_cls))
    assert fp16_signs(fp32) is None
    model, _ = _fp16(ppocr_cls, "cls", tmp_path / "cls_fp16.onnx")
    signs = fp16_signs(onnx.load(str(model)))
    assert signs is not None and signs.constants > 100 and signs.casts > 0 and signs.inputs == 0
    lifted = lift_to_fp32(onnx.load(str(model)))
    assert fp16_signs(lifted) is None
    onnx.checker.check_model(lifted)
