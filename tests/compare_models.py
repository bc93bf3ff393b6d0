"""Small ONNX graphs for the compare tests: every op an injected bug needs, in a model the simulator runs fast."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mixed_ops_net(seed: int = 0) -> onnx.ModelProto:
    """x[1,3,16,16] → Conv → Relu → Resize(½, linear, half_pixel) → Conv → Softmax(axis=1) → Flatten → Gemm."""
    rng = np.random.default_rng(seed)

    def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(arr.astype(np.float32), name)

    inits = [
        init("w1", rng.standard_normal((8, 3, 3, 3)) * np.sqrt(2 / 27)),
        init("b1", rng.standard_normal(8) * 0.1),
        init("w2", rng.standard_normal((8, 8, 3, 3)) * np.sqrt(2 / 72)),
        init("b2", rng.standard_normal(8) * 0.1),
        init("roi", np.zeros(0)),
        init("scales", np.array([1, 1, 0.5, 0.5])),
        init("fc_w", rng.standard_normal((10, 8 * 8 * 8)) * np.sqrt(1 / 512)),
        init("fc_b", rng.standard_normal(10) * 0.05),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Resize", ["r1", "roi", "scales"], ["rs"], name="resize", mode="linear",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("Conv", ["rs", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Softmax", ["c2"], ["sm"], name="softmax", axis=1),
        helper.make_node("Flatten", ["sm"], ["fl"], name="flatten", axis=1),
        helper.make_node("Gemm", ["fl", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "mixed_ops_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="qnn-debug-tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model
