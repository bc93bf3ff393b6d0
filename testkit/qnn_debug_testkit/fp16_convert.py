"""An fp32 ONNX model converted to compute in fp16, as users' fp16 conversions do (tests only).

What ``onnxconverter_common.float16.convert_float_to_float16(keep_io_types=True, op_block_list=...)`` does, in
the few lines the tests need: float initializers and constants become float16 (clipped to ±65504),
``Cast(to=FLOAT)`` becomes ``Cast(to=FLOAT16)``, the graph keeps float32 inputs and outputs behind a Cast, and
the ops of ``block`` stay in fp32 between Casts (BatchNormalization: PP-OCR's running variances exceed
fp16's range; Resize: its ``scales`` must stay float32). Names of the converted tensors are kept.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FP16_MAX = 65504.0
BLOCKED = ("BatchNormalization", "Resize", "Upsample")


def _half(t: onnx.TensorProto) -> onnx.TensorProto:
    arr = numpy_helper.to_array(t)
    out: onnx.TensorProto = numpy_helper.from_array(np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16), t.name)
    return out


def to_fp16(model: onnx.ModelProto, *, block: tuple[str, ...] = BLOCKED) -> onnx.ModelProto:
    """A copy of ``model`` whose float tensors are float16 but for the ``block`` ops, which compute in fp32."""
    m = copy.deepcopy(model)
    g = m.graph
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.input,
                                                              *inferred.graph.output]}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)

    def only_blocked(name: str) -> bool:
        users = consumers.get(name, [])
        return bool(users) and all(u.op_type in block for u in users)

    kept32: set[str] = set()  # float tensors that stay float32 (consumed by blocked ops only)
    for i, init in enumerate(g.initializer):
        types[init.name] = init.data_type
        if init.data_type == TensorProto.FLOAT:
            if only_blocked(init.name):
                kept32.add(init.name)
            else:
                g.initializer[i].CopyFrom(_half(init))
    for n in g.node:
        if n.op_type in ("Constant", "ConstantOfShape"):
            for a in n.attribute:
                if a.name == "value" and a.HasField("t") and a.t.data_type == TensorProto.FLOAT:
                    types[n.output[0]] = TensorProto.FLOAT
                    if only_blocked(n.output[0]):
                        kept32.add(n.output[0])
                    else:
                        a.t.CopyFrom(_half(a.t))
        elif n.op_type == "Cast" and n.op_type not in block:
            for a in n.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.FLOAT16

    def is_float(name: str) -> bool:
        return types.get(name) == TensorProto.FLOAT

    nodes: list[onnx.NodeProto] = []
    for inp in g.input:  # float32 inputs, cast to fp16 for their consumers
        if is_float(inp.name) and inp.name not in {i.name for i in g.initializer}:
            half = f"{inp.name}_fp16"
            nodes.append(helper.make_node("Cast", [inp.name], [half], name=f"{inp.name}_to_fp16", to=TensorProto.FLOAT16))
            for n in g.node:
                n.input[:] = [half if x == inp.name else x for x in n.input]
    outputs = {o.name for o in g.output if is_float(o.name)}
    for n in g.node:
        if n.op_type in block:
            for j, x in enumerate(n.input):
                if x and is_float(x) and x not in kept32:
                    cast = f"{x}_{n.name}_fp32"
                    nodes.append(helper.make_node("Cast", [x], [cast], name=f"{n.name}_in{j}_fp32", to=TensorProto.FLOAT))
                    n.input[j] = cast
        nodes.append(n)
        for j, y in enumerate(n.output):
            if n.op_type in block and is_float(y):
                n.output[j] = f"{y}_fp32"
                to = TensorProto.FLOAT if y in outputs else TensorProto.FLOAT16
                nodes.append(helper.make_node("Cast", [n.output[j]], [y], name=f"{n.name}_out{j}", to=to))
            elif y in outputs:
                n.output[j] = f"{y}_fp16"
                for c in consumers.get(y, []):
                    c.input[:] = [n.output[j] if x == y else x for x in c.input]
                nodes.append(helper.make_node("Cast", [n.output[j]], [y], name=f"{y}_to_fp32", to=TensorProto.FLOAT))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    onnx.checker.check_model(m)
    return m
