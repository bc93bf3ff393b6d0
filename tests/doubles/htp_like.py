"""A tensor dump as HTP's fp16 would give it, made on ONNX Runtime CPU: every float op output stored in fp16 with
HTP's range (no inf: values up to 131008 kept with exponent-31 codes, saturated beyond), then read back as float.

What the simulator's mark-all run gives for graphs it cannot finalise marked (a QNN_COMMON_ERROR_MEM_ALLOC on the
small VL graphs): rounding to fp16 and the saturation rail, not its LUT ops. The stored value is rounded as fp16
rounds half the value (exact for a power of two), so 65504 < |x| <= 131008 keeps fp16's 11-bit precision as the
exponent-31 codes do.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qnn_debug.onnx_graph import tensor_elem_types

HTP_MAX = 131008.0


def htp_like(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float output rounded and saturated as HTP stores it, each marked as a graph output."""
    m = copy.deepcopy(model)
    types = tensor_elem_types(m)
    g = m.graph
    g.initializer.extend(numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                         (("htp.lo", -HTP_MAX), ("htp.hi", HTP_MAX), ("htp.half", 0.5), ("htp.two", 2.0)))
    nodes: list[onnx.NodeProto] = []
    marked: list[str] = []
    for node in list(g.node):
        nodes.append(node)
        for j, out in enumerate(node.output):
            if not out:
                continue
            marked.append(out)
            if types.get(out) != TensorProto.FLOAT:
                continue
            pre = f"{out}.htp_pre"
            node.output[j] = pre
            nodes += [helper.make_node("Clip", [pre, "htp.lo", "htp.hi"], [f"{out}.htp_c"]),
                      helper.make_node("Mul", [f"{out}.htp_c", "htp.half"], [f"{out}.htp_h"]),
                      helper.make_node("Cast", [f"{out}.htp_h"], [f"{out}.htp_16"], to=TensorProto.FLOAT16),
                      helper.make_node("Cast", [f"{out}.htp_16"], [f"{out}.htp_32"], to=TensorProto.FLOAT),
                      helper.make_node("Mul", [f"{out}.htp_32", "htp.two"], [out])]
    del g.node[:]
    g.node.extend(nodes)
    have = {o.name for o in g.output}
    g.output.extend(helper.make_tensor_value_info(o, types.get(o, TensorProto.FLOAT), None) for o in marked
                    if o not in have)
    return m


def htp_like_dump(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{tensor name: value} for every op output and graph input, as an ``.npz`` dump with ONNX names holds them."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(htp_like(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    out = dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))
    out.update({k: v for k, v in feeds.items() if k in wanted})
    return {k: np.asarray(v) for k, v in out.items()}
