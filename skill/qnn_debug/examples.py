"""Small, deterministic ONNX models the project builds itself (demo, tests, benchmarks).

They mirror the shapes measured in the HTP-simulator reference: a 4-node conv net like MNN's own
fixture, and the 24-block conv net (90 nodes) used for per-layer fp16 error curves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto], name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qnn-debug")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """x[1,3,32,32] → Conv(3→16,3x3,bias) → Relu → Conv(16→16,3x3) → GlobalAveragePool → y[1,16,1,1]."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((16, 3, 3, 3)) * np.sqrt(2 / 27)).astype(np.float32)
    b1 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((16, 16, 3, 3)) * np.sqrt(2 / 144)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")],
        "small_cnn",
    )


def deep_conv_net(blocks: int = 24, channels: int = 32, size: int = 32, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """stem + blocks×[Conv3x3 + BN + (Add every 2nd block) + Relu] + GAP + Flatten + Gemm + Softmax.

    With the defaults this is ~90 nodes: deep enough that fp16 error grows measurably with depth.
    """
    rng = np.random.default_rng(seed)
    c = channels
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def add_init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def conv_bn(prefix: str, src: str, cin: int) -> str:
        w = add_init(f"{prefix}_w", rng.standard_normal((c, cin, 3, 3)) * np.sqrt(2 / (cin * 9)))
        b = add_init(f"{prefix}_b", rng.standard_normal(c) * 0.05)
        nodes.append(helper.make_node("Conv", [src, w, b], [f"{prefix}_conv"], name=f"{prefix}_conv", pads=[1, 1, 1, 1]))
        scale = add_init(f"{prefix}_bn_scale", 1 + 0.1 * rng.standard_normal(c))
        bias = add_init(f"{prefix}_bn_bias", 0.1 * rng.standard_normal(c))
        mean = add_init(f"{prefix}_bn_mean", 0.1 * rng.standard_normal(c))
        var = add_init(f"{prefix}_bn_var", 1 + 0.1 * np.abs(rng.standard_normal(c)))
        nodes.append(helper.make_node("BatchNormalization", [f"{prefix}_conv", scale, bias, mean, var],
                                      [f"{prefix}_bn"], name=f"{prefix}_bn", epsilon=1e-5))
        return f"{prefix}_bn"

    cur = conv_bn("stem", "x", 3)
    nodes.append(helper.make_node("Relu", [cur], ["stem_relu"], name="stem_relu"))
    cur = "stem_relu"
    skip = cur
    for i in range(blocks):
        bn = conv_bn(f"b{i}", cur, c)
        pre = bn
        if i % 2 == 1:
            nodes.append(helper.make_node("Add", [bn, skip], [f"b{i}_add"], name=f"b{i}_add"))
            pre = f"b{i}_add"
        nodes.append(helper.make_node("Relu", [pre], [f"b{i}_relu"], name=f"b{i}_relu"))
        cur = f"b{i}_relu"
        if i % 2 == 1:
            skip = cur
    nodes.append(helper.make_node("GlobalAveragePool", [cur], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    fw = add_init("fc_w", rng.standard_normal((classes, c)) * np.sqrt(1 / c))
    fb = add_init("fc_b", rng.standard_normal(classes) * 0.05)
    nodes.append(helper.make_node("Gemm", ["flat", fw, fb], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1))
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, classes])],
        inits,
        f"deep_conv_net_{blocks}",
    )


def single_op_model(op_type: str, shape: list[int], name: str = "op", **attrs: Any) -> onnx.ModelProto:
    """x[shape] → ``op_type`` → y[shape]: the smallest graph that exercises one op (support, NaN, ...)."""
    node = helper.make_node(op_type, ["x"], ["y"], name=name, **attrs)
    return _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [], f"single_{op_type.lower()}")


def quantize_for_qnn(src: str, dst: str, *, activation: str = "uint8", samples: int = 4, seed: int = 0) -> str:
    """QDQ-quantize ``src`` the way QNN's flow expects: BN folded first, QNN's QDQ config, uint8 weights.

    ``activation`` is ``uint8`` (A8W8) or ``uint16`` (A16W8; upgrades the model to opset 21).
    Calibration uses seeded realistic inputs of the model's static input shapes.
    """
    import os

    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from . import fs
    from .inputs import random_inputs, resolve_shapes
    from .onnx_graph import graph_inputs, load_onnx

    src = str(fs.check(src, what="model to quantize", kind="file"))
    dst = str(fs.writable_path(dst, what="quantized model"))
    specs = graph_inputs(load_onnx(src))
    shapes = resolve_shapes(specs)
    batches = iter([random_inputs(specs, shapes, seed=seed + i) for i in range(samples)])

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    act = {"uint8": QuantType.QUInt8, "uint16": QuantType.QUInt16}[activation]
    with fs.scratch("qnn-debug-quant-") as tmp:
        pre = os.path.join(tmp, "pre.onnx")
        quant_pre_process(src, pre)
        quantize(pre, dst, get_qnn_qdq_config(pre, Reader(), activation_type=act, weight_type=QuantType.QUInt8))
    return dst
