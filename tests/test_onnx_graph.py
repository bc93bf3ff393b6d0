"""mark-all and the fp16 floor on real ONNX Runtime: names kept, values at fp16 level, no invented inf."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from qnn_debug.examples import deep_conv_net, small_cnn
from qnn_debug.onnx_graph import fp16_floor, mark_all, nodes_in_order


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def test_mark_all_exposes_every_node_output():
    model = small_cnn()
    out = _run(mark_all(model), {"x": np.ones((1, 3, 32, 32), np.float32)})
    assert set(out) == {"c1", "r1", "c2", "y"}
    assert [n.name for n in nodes_in_order(model)] == ["conv1", "relu1", "conv2", "gap"]


def test_floor_is_at_fp16_level_on_deep_net():
    model = deep_conv_net(blocks=8)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = _run(mark_all(model), {"x": x})
    floor = _run(mark_all(fp16_floor(model)), {"x": x})
    assert set(ref) <= set(floor)
    for name, r in ref.items():
        rel = np.abs(floor[name] - r).max() / max(np.abs(r).max(), 1e-6)
        assert 0 < rel < 2e-2, (name, rel)  # rounded (non-zero) but only at fp16 level
        assert np.array_equal(floor[name], floor[name].astype(np.float16).astype(np.float32))


def test_floor_saturates_instead_of_inf():
    # x*1000*0.001 with x = 300: the intermediate 3e5 overflows fp16; HTP saturates, so must the floor.
    nodes = [helper.make_node("Mul", ["x", "k1"], ["big"], name="m1"), helper.make_node("Mul", ["big", "k2"], ["y"], name="m2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                          [numpy_helper.from_array(np.array(1000, np.float32), "k1"),
                           numpy_helper.from_array(np.array(0.001, np.float32), "k2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    y = _run(fp16_floor(m), {"x": np.array([300, 1], np.float32)})["y"]
    assert np.isfinite(y).all() and abs(y[0] - 65.5) < 0.1 and abs(y[1] - 1) < 1e-3
