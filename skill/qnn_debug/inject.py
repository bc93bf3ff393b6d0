"""Inject known QNN bug patterns into an ONNX model, keeping every original tensor name.

Running the edited model on the HTP simulator and comparing it with the baseline of the *original*
model gives a realistic "buggy QNN run": real fp16 noise, the error propagating downstream, and a
known answer (the injected op is the first failing op). Used by tests, the demo and the benchmarks.

Helper tensors and nodes carry :data:`TAG` in their names, so they are recognisable in a dump (they
show up as target-only tensors, not in the reference).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import BadInputError
from .onnx_graph import ensure_node_names, graph_inputs

TAG = "__qd_inject"

InjectFn = Callable[..., onnx.ModelProto]
INJECTIONS: dict[str, InjectFn] = {}


def injection(name: str) -> Callable[[InjectFn], InjectFn]:
    def register(fn: InjectFn) -> InjectFn:
        INJECTIONS[name] = fn
        return fn

    return register


def inject(model: onnx.ModelProto, kind: str, node: str | None = None, **params: Any) -> onnx.ModelProto:
    """Apply the injection ``kind`` (see :data:`INJECTIONS`) at ``node``; returns a checked copy."""
    fn = INJECTIONS.get(kind)
    if fn is None:
        raise BadInputError(f"unknown injection {kind!r}", hint=f"choose one of: {', '.join(sorted(INJECTIONS))}")
    edited = fn(model, node, **params) if node is not None else fn(model, **params)
    onnx.checker.check_model(edited)
    return edited


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    return ensure_node_names(copy.deepcopy(model))


def _node(model: onnx.ModelProto, name: str, op_types: tuple[str, ...] = ()) -> tuple[int, onnx.NodeProto]:
    for i, n in enumerate(model.graph.node):
        if n.name == name:
            if op_types and n.op_type not in op_types:
                raise BadInputError(f"node {name!r} is a {n.op_type}, not {' or '.join(op_types)}")
            return i, n
    raise BadInputError(f"the model has no node named {name!r}",
                        hint="node names: " + ", ".join(n.name for n in model.graph.node[:20]))


def _const(model: onnx.ModelProto, value: float, what: str) -> str:
    name = f"{what}{TAG}_const"
    n = 1
    existing = {i.name for i in model.graph.initializer}
    while name in existing:
        n += 1
        name = f"{what}{TAG}_const{n}"
    model.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
    return name


def _feed_through(model: onnx.ModelProto, index: int, node: onnx.NodeProto, input_slot: int, op: str,
                  extra_inputs: list[str], kind: str, **attrs: Any) -> onnx.ModelProto:
    """Insert ``op(node.input[slot], *extra)`` right before ``node`` and feed its result to that slot."""
    src = node.input[input_slot]
    dst = f"{src}{TAG}_{kind}"
    new = helper.make_node(op, [src, *extra_inputs], [dst], name=f"{node.name}{TAG}_{kind}", **attrs)
    node.input[input_slot] = dst
    model.graph.node.insert(index, new)
    return model


@injection("zero_input")
def zero_input(model: onnx.ModelProto, input_name: str | None = None) -> onnx.ModelProto:
    """Every consumer of a graph input reads zeros (MNN's shapeMutable=true symptom)."""
    m = _copy(model)
    names = [s.name for s in graph_inputs(m)]
    name = input_name or names[0]
    if name not in names:
        raise BadInputError(f"{name!r} is not a graph input", hint=f"graph inputs: {', '.join(names)}")
    zeroed = f"{name}{TAG}_zero"
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            if x == name:
                n.input[i] = zeroed
    m.graph.node.insert(0, helper.make_node("Mul", [name, _const(m, 0.0, name)], [zeroed], name=f"{name}{TAG}_zero"))
    return m


@injection("conv_on_zeros")
def conv_on_zeros(model: onnx.ModelProto, node: str) -> onnx.ModelProto:
    """One Conv (or any op) reads zeros instead of its data input: its output becomes the bias."""
    m = _copy(model)
    index, n = _node(m, node)
    return _feed_through(m, index, n, 0, "Mul", [_const(m, 0.0, n.input[0])], "zero")


@injection("nhwc_flatten")
def nhwc_flatten(model: onnx.ModelProto, node: str) -> onnx.ModelProto:
    """A Flatten/Reshape reads its NCHW input in NHWC order (MNN NC4HW4 data flattened channel-last)."""
    m = _copy(model)
    index, n = _node(m, node, ("Flatten", "Reshape"))
    rank = _rank(m, n.input[0])
    perm = [0, *range(2, rank), 1]
    return _feed_through(m, index, n, 0, "Transpose", [], "nhwc", perm=perm)


@injection("resize_coordinates")
def resize_coordinates(model: onnx.ModelProto, node: str, mode: str = "asymmetric") -> onnx.ModelProto:
    """A Resize computed with another coordinate_transformation_mode than the model asks for."""
    m = _copy(model)
    _, n = _node(m, node, ("Resize",))
    _set_attr(n, "coordinate_transformation_mode", mode)
    return m


@injection("softmax_axis")
def softmax_axis(model: onnx.ModelProto, node: str, axis: int = -1) -> onnx.ModelProto:
    """A Softmax normalised along another axis."""
    m = _copy(model)
    _, n = _node(m, node, ("Softmax", "LogSoftmax"))
    _set_attr(n, "axis", axis)
    return m


@injection("scale_output")
def scale_output(model: onnx.ModelProto, node: str, factor: float = 0.5) -> onnx.ModelProto:
    """An op's output multiplied by ``factor`` (a wrong scale, e.g. a requantisation or activation bug)."""
    m = _copy(model)
    index, n = _node(m, node)
    out = n.output[0]
    pre = f"{out}{TAG}_pre"
    n.output[0] = pre
    mul = helper.make_node("Mul", [pre, _const(m, factor, out)], [out], name=f"{n.name}{TAG}_scale")
    m.graph.node.insert(index + 1, mul)
    return m


@injection("drop_bias")
def drop_bias(model: onnx.ModelProto, node: str) -> onnx.ModelProto:
    """A Conv/Gemm computed without its bias."""
    m = _copy(model)
    _, n = _node(m, node, ("Conv", "ConvTranspose", "Gemm"))
    if len(n.input) < 3 or not n.input[2]:
        raise BadInputError(f"node {node!r} has no bias to drop")
    del n.input[2:]
    return m


@injection("conv_weight_layout")
def conv_weight_layout(model: onnx.ModelProto, node: str) -> onnx.ModelProto:
    """A Conv whose OIHW weights were laid out as OHWI (memory reinterpreted, not transposed)."""
    m = _copy(model)
    _, n = _node(m, node, ("Conv",))
    inits = {i.name: i for i in m.graph.initializer}
    if n.input[1] not in inits:
        raise BadInputError(f"the weights of {node!r} are not an initializer")
    w = numpy_helper.to_array(inits[n.input[1]])
    o, i, kh, kw = w.shape
    name = f"{n.input[1]}{TAG}_ohwi"
    m.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(o, i, kh, kw), name))
    n.input[1] = name
    return m


def _set_attr(node: onnx.NodeProto, name: str, value: Any) -> None:
    keep = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(keep)
    node.attribute.append(helper.make_attribute(name, value))


def _rank(model: onnx.ModelProto, name: str) -> int:
    inferred = onnx.shape_inference.infer_shapes(model)
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if v.name == name and v.type.tensor_type.HasField("shape"):
            return len(v.type.tensor_type.shape.dim)
    raise BadInputError(f"cannot infer the rank of {name!r}", hint="give the model static shapes")
