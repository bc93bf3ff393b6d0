"""QDQ models for the quantization tests: A8W8 (QUInt8/QInt8) and A16W8 (QUInt16/QUInt8, QNN config), calibrated
on a few seeded batches, and an edit that shrinks one activation encoding (a device encoding narrower than the
calibrated one: the target clips at its rail)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def quantize(float_model: onnx.ModelProto, out: Path, bits: int, *, seed: int = 7, batches: int = 4,
             calibration: list[np.ndarray] | None = None) -> Path:
    """``float_model`` → QDQ at ``out`` with ``bits``-bit activations (8: quantize_static, 16: QNN A16W8),
    calibrated on ``calibration`` arrays (default: ``batches`` seeded normal batches)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize,
        quantize_static,
    )
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config
    from onnxruntime.quantization.shape_inference import quant_pre_process

    raw, pre = out.with_suffix(".raw.onnx"), out.with_suffix(".pre.onnx")
    onnx.save(float_model, str(raw))
    quant_pre_process(str(raw), str(pre))
    inp = float_model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(seed)
            arrays = calibration or [rng.standard_normal(shape).astype(np.float32) for _ in range(batches)]
            self.data = iter([{inp.name: a} for a in arrays])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.data, None)

    if bits == 8:
        quantize_static(str(pre), str(out), Calibration(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    else:
        cfg = get_qnn_qdq_config(str(pre), Calibration(), activation_type=QuantType.QUInt16,
                                 weight_type=QuantType.QUInt8)
        quantize(str(pre), str(out), cfg)
    return out


def shrink_encoding(model: onnx.ModelProto, tensor: str, factor: float = 4.0) -> onnx.ModelProto:
    """Divide the scale of the activation QuantizeLinear of ``tensor`` (and of the DequantizeLinear nodes that
    read its output) by ``factor``: the device's encoding range becomes ``1/factor`` of the calibrated one."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    scales = {q.input[1]}
    scales |= {n.input[1] for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0]}
    inits = {i.name: i for i in m.graph.initializer}
    for name in scales:
        arr = numpy_helper.to_array(inits[name])
        inits[name].CopyFrom(numpy_helper.from_array((arr / factor).astype(arr.dtype), name))
    return m


def activation_points(model: onnx.ModelProto) -> list[str]:
    """Float tensors with an activation QuantizeLinear, in graph order."""
    inits = {i.name for i in model.graph.initializer}
    return [n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]


def inherit_encoding(model: onnx.ModelProto, tensor: str, donor: str) -> onnx.ModelProto:
    """The activation QuantizeLinear of ``tensor`` (and the DequantizeLinear nodes reading it) use ``donor``'s
    scale and zero point: an exporter that gives a Mul output (SwiGLU gate*up) one operand's encoding."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    q = {n.input[0]: n for n in m.graph.node if n.op_type == "QuantizeLinear"}
    mine, theirs = q[tensor], q[donor]
    swap = {mine.input[1]: theirs.input[1], mine.input[2]: theirs.input[2]}
    for n in [mine, *(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == mine.output[0])]:
        n.input[1], n.input[2] = swap[n.input[1]], swap[n.input[2]]
    return m
