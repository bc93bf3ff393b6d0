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
from onnx import TensorProto, numpy_helper

from qnn_debug.baseline import run_baseline
from qnn_debug.baseline_fp16 import U16, Fp16Arithmetic, gate_limit, limit_words
from qnn_debug.baseline_models import GateOutput
from qnn_debug.inputs import fix_input_shapes
from qnn_debug.onnx_fp16 import Fp16Signs, fp16_signs, lift_to_fp32
from qnn_debug_testkit.fp16_convert import to_fp16

SHAPES = {"cls": [1, 3, 48, 192], "rec": [1, 3, 48, 160]}


def _fp16(src: Path, kind: str, dst: Path, *, half_io: bool = False) -> tuple[Path, Path]:
    """(the fp16 model, its inputs): PP-OCR at a fixed shape, converted to fp16; ``half_io``: its input float16
    too (the input's Cast removed), as converters without keep_io_types write it."""
    model = to_fp16(fix_input_shapes(onnx.load(str(src)), {"x": SHAPES[kind]}))
    x = np.random.default_rng(0).uniform(-1, 1, SHAPES[kind]).astype(np.float32)
    if half_io:
        cast = next(n for n in model.graph.node if n.op_type == "Cast" and list(n.input) == ["x"])
        model.graph.node.remove(cast)
        for n in model.graph.node:
            n.input[:] = ["x" if i == cast.output[0] else i for i in n.input]
        model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
        x = x.astype(np.float16)
    onnx.save(model, str(dst))
    np.savez(dst.with_suffix(".npz"), x=x)
    return dst, dst.with_suffix(".npz")


@pytest.fixture(params=["cls", "cls-half-io", "rec"])
def ppocr_fp16(request: pytest.FixtureRequest, ppocr_cls: Path, ppocr_rec: Path, tmp_path: Path) -> tuple[Path, Path]:
    kind = request.param.split("-")[0]
    return _fp16(ppocr_cls if kind == "cls" else ppocr_rec, kind, tmp_path / f"{kind}_fp16.onnx",
                 half_io=request.param.endswith("half-io"))


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


def test_gate_limit_rules() -> None:
    """The fp32 rule where fp16 arithmetic does not reach; twice its error where it does, within [u16, 1e-2]."""
    assert gate_limit(1.2e-3, None) == (pytest.approx(1.2e-4), "fp32")
    assert gate_limit(None, None) == (1e-4, "fp32")
    assert gate_limit(1e-3, 6e-4) == (pytest.approx(1.2e-3), "fp16")
    assert gate_limit(1e-3, 1e-6) == (U16, "fp16")  # a float16 value is not known closer than its rounding
    assert gate_limit(0.2, 1e-6) == (1e-2, "fp32")  # the floor's rule is the larger
    assert gate_limit(None, 0.03) == (1e-2, "fp16")  # capped
    out = GateOutput(name="y", rel_error=0.05, max_abs=1.0, ref_max_abs=1.0, floor_rel_error=0.1, limit=1e-2,
                     passed=False, limit_rule="fp16", fp16_own_rel_error=0.03)
    assert "capped" in limit_words(Fp16Arithmetic(signs=Fp16Signs(casts=2)), [out])
    failed = Fp16Arithmetic(signs=Fp16Signs(initializers=3), error="ONNX Runtime cannot load the model: X")
    words = limit_words(failed, [])
    assert words.startswith("fp32 limit, although the graph computes in fp16 (3 float16 initializers)")
    assert "cannot load the model: X" in words
