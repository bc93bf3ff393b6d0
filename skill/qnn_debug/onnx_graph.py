"""ONNX graph helpers shared by every ONNX-based target: load, execution order, mark-all, fp16 floor.

All transformations work on copies and keep tensor names, so every run of the same model can be
aligned by name. Facts behind the fp16 floor (measured on the HTP simulator): HTP rounds every float
tensor to fp16 but *saturates* instead of overflowing to inf, so the floor clips to ±65504 before the
cast; constants (Constant/ConstantOfShape/Shape/Size outputs) must not be rounded (a BN variance of
9.8e7 would become inf); initializers are rounded only where |w| <= 65504.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import fs
from .errors import BadInputError
from .runstore import TensorSpec

FP16_MAX = 65504.0
FLOOR_SUFFIX = "__qd_pre_fp16"
# Producers whose outputs are weights or shape arithmetic, never rounded by the floor.
_CONSTANT_PRODUCERS = {"Constant", "ConstantOfShape", "Shape", "Size"}

_ELEM_TO_NP: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "float64",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32",
    TensorProto.UINT32: "uint32",
    TensorProto.INT64: "int64",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
}


@dataclass(frozen=True)
class NodeInfo:
    """One node in execution (topological, as stored) order; ``name`` is never empty."""

    position: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _load_external_data(model: onnx.ModelProto, base: Path) -> None:
    """External tensor data, each file checked like every other file we open (inside the roots, regular)."""
    from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_model, uses_external_data

    tensors = [*model.graph.initializer, *(a.t for n in model.graph.node for a in n.attribute if a.HasField("t"))]
    external = [t for t in tensors if uses_external_data(t)]
    for t in external:
        fs.check(base / ExternalDataInfo(t).location, what=f"external data of tensor {t.name!r}", kind="file")
    if external:
        load_external_data_for_model(model, str(base))


def load_onnx(path: str | os.PathLike[str], *, load_external_data: bool = True) -> onnx.ModelProto:
    """Load an ONNX model with clear errors for missing, empty or corrupt files."""
    p = Path(path)
    if not p.exists():
        raise BadInputError(f"model file {p} does not exist", hint="check the path")
    if p.is_dir():
        raise BadInputError(f"model path {p} is a directory", hint="pass the .onnx file")
    real = fs.check(p, what="model file", kind="file")
    if real.stat().st_size == 0:
        raise BadInputError(f"model file {p} is empty", hint="re-export the model")
    try:
        with fs.open_read(p, what="model file") as f:
            model = onnx.load_model_from_string(f.read())
        if load_external_data:
            _load_external_data(model, real.parent)
    except BadInputError:
        raise
    except Exception as e:
        raise BadInputError(f"{p} is not a readable ONNX model: {type(e).__name__}: {e}", hint="re-export the model") from None
    if len(model.graph.node) == 0:
        raise BadInputError(f"{p} has an empty graph", hint="re-export the model")
    return model


def ensure_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every unnamed node a stable name ``<op_type>_<index>`` (in place; returns the model)."""
    used = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            cand = f"{node.op_type}_{i}"
            while cand in used:
                cand += "_"
            node.name = cand
            used.add(cand)
    return model


def nodes_in_order(model: onnx.ModelProto) -> list[NodeInfo]:
    """Top-level nodes in execution order (ONNX requires stored order to be topological)."""
    out = []
    for i, n in enumerate(model.graph.node):
        out.append(
            NodeInfo(
                position=i,
                name=n.name or f"{n.op_type}_{i}",
                op_type=n.op_type,
                domain=n.domain,
                inputs=tuple(n.input),
                outputs=tuple(o for o in n.output if o),
            )
        )
    return out


def producer_map(model: onnx.ModelProto) -> dict[str, NodeInfo]:
    """Tensor name → the node that produces it (graph inputs and initializers are absent)."""
    return {o: node for node in nodes_in_order(model) for o in node.outputs}


def initializer_names(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.initializer}


def graph_inputs(model: onnx.ModelProto) -> list[TensorSpec]:
    """Real graph inputs (initializers listed as inputs in old opsets are excluded)."""
    inits = initializer_names(model)
    return [_spec(v) for v in model.graph.input if v.name not in inits]


def graph_outputs(model: onnx.ModelProto) -> list[TensorSpec]:
    return [_spec(v) for v in model.graph.output]


def _spec(v: onnx.ValueInfoProto) -> TensorSpec:
    t = v.type.tensor_type
    dims: list[int | str | None] = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorSpec(name=v.name, shape=dims, dtype=np_dtype_name(t.elem_type))


def tensor_elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every named tensor, via ONNX shape inference (best effort)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:
        inferred = model
    types: dict[str, int] = {}
    for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    return types


def static_shapes(model: onnx.ModelProto, names: set[str]) -> dict[str, tuple[list[int], int]]:
    """(dims, ONNX element type) of ``names`` where ONNX shape inference fixes every dimension (best effort; the
    weights need not be loaded: initializers keep their dims)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        return {}
    return fixed_shapes(inferred, names)


def fixed_shapes(inferred: onnx.ModelProto, names: set[str]) -> dict[str, tuple[list[int], int]]:
    """(dims, ONNX element type) of ``names`` whose every dimension a shape inference already wrote into
    ``inferred`` (its value_info, outputs and inputs)."""
    out: dict[str, tuple[list[int], int]] = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
        t = v.type.tensor_type
        if v.name not in names or not v.type.HasField("tensor_type") or not t.elem_type or not t.HasField("shape"):
            continue
        dims = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if all(d >= 0 for d in dims):
            out[v.name] = (dims, int(t.elem_type))
    return out


def np_dtype_name(elem_type: int) -> str:
    return _ELEM_TO_NP.get(elem_type) or f"onnx:{elem_type}"


def mark_all(model: onnx.ModelProto, names: list[str] | None = None) -> onnx.ModelProto:
    """A copy of ``model`` with every node output (or just ``names``) added as a graph output.

    Outputs whose element type is unknown after shape inference (e.g. com.microsoft QDQ ops) are
    added without any type, which ONNX Runtime accepts and infers. Existing graph outputs keep their position at the front.
    """
    m = copy.deepcopy(model)
    existing = {o.name for o in m.graph.output}
    wanted = names if names is not None else [o for n in nodes_in_order(m) for o in n.outputs]
    types = tensor_elem_types(m)
    for name in wanted:
        if name in existing:
            continue
        existing.add(name)
        elem = types.get(name, TensorProto.UNDEFINED)
        # An explicit elem_type 0 is rejected ("Invalid tensor data type 0"); no type at all lets ORT infer it.
        info = helper.make_tensor_value_info(name, elem, None) if elem else onnx.ValueInfoProto(name=name)
        m.graph.output.append(info)
    return m


def _default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def fp16_floor(model: onnx.ModelProto) -> onnx.ModelProto:
    """The "well-behaved fp16" floor: every float32 tensor stored as fp16, compute in fp32.

    After each float32 node output (and each float32 graph input) insert
    ``Clip(±65504) → Cast(FLOAT16) → Cast(FLOAT)``; the last Cast writes the original tensor name, so
    consumers, graph outputs and mark-all names are unchanged. Float initializers are rounded to fp16
    where |w| <= 65504. Constant-producing ops and non-float tensors are left alone. Clipping models
    HTP's saturation, so the floor does not invent inf/NaN where HTP stays finite.
    """
    m = copy.deepcopy(model)
    ensure_node_names(m)
    types = tensor_elem_types(m)
    opset = _default_opset(m)
    graph = m.graph
    new_nodes: list[onnx.NodeProto] = []
    bound_names: list[onnx.TensorProto] = []

    def rounding_chain(src: str, dst: str, tag: str) -> list[onnx.NodeProto]:
        clipped = f"{dst}{FLOOR_SUFFIX}_clip"
        half = f"{dst}{FLOOR_SUFFIX}_half"
        if opset >= 11:
            if not bound_names:
                bound_names.append(numpy_helper.from_array(np.array(-FP16_MAX, np.float32), "qd_fp16_min"))
                bound_names.append(numpy_helper.from_array(np.array(FP16_MAX, np.float32), "qd_fp16_max"))
            clip = helper.make_node("Clip", [src, "qd_fp16_min", "qd_fp16_max"], [clipped], name=f"{tag}_clip")
        else:
            clip = helper.make_node("Clip", [src], [clipped], name=f"{tag}_clip", min=-FP16_MAX, max=FP16_MAX)
        return [
            clip,
            helper.make_node("Cast", [clipped], [half], name=f"{tag}_to_fp16", to=TensorProto.FLOAT16),
            helper.make_node("Cast", [half], [dst], name=f"{tag}_to_fp32", to=TensorProto.FLOAT),
        ]

    # Float graph inputs: consumers read a rounded copy.
    inits = initializer_names(m)
    renamed_inputs: dict[str, str] = {}
    for inp in graph.input:
        if inp.name in inits or inp.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        rounded = f"{inp.name}{FLOOR_SUFFIX}_in"
        renamed_inputs[inp.name] = rounded
        new_nodes.extend(rounding_chain(inp.name, rounded, f"qd_floor_in_{len(renamed_inputs)}"))

    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renamed_inputs:
                node.input[i] = renamed_inputs[name]
        new_nodes.append(node)
        if node.op_type in _CONSTANT_PRODUCERS:
            continue
        for j, out in enumerate(node.output):
            if not out or types.get(out) != TensorProto.FLOAT:
                continue
            pre = f"{out}{FLOOR_SUFFIX}"
            node.output[j] = pre
            new_nodes.extend(rounding_chain(pre, out, f"qd_floor_{node.name}_{j}"))

    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(bound_names)

    external = [init.name for init in graph.initializer
                if init.data_type == TensorProto.FLOAT and init.data_location == TensorProto.EXTERNAL]
    if external and opset >= 12:
        _round_in_graph(graph, external)
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or init.name in ("qd_fp16_min", "qd_fp16_max"):
            continue
        if init.data_location == TensorProto.EXTERNAL:
            continue  # not loaded (a model opened without its weights): rounded in the graph above
        weights = numpy_helper.to_array(init)
        halved = np.where(np.abs(weights) <= FP16_MAX, weights.astype(np.float16).astype(np.float32), weights)
        init.CopyFrom(numpy_helper.from_array(halved.astype(np.float32), init.name))
    return m


def _round_in_graph(graph: onnx.GraphProto, names: list[str]) -> None:
    """Round weights that stay in their data file as the floor rounds loaded ones (to fp16 where |w| <= 65504),
    with ops ONNX Runtime folds when it loads them: no copy of the weights is ever made in Python."""
    limit = f"qd_fp16_limit{FLOOR_SUFFIX}"
    graph.initializer.append(numpy_helper.from_array(np.array(FP16_MAX, np.float32), limit))
    renamed = {n: f"{n}{FLOOR_SUFFIX}_w" for n in names}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
    rounding: list[onnx.NodeProto] = []
    for k, (name, new) in enumerate(renamed.items()):
        tag = f"qd_floor_w{k}"
        rounding += [
            helper.make_node("Abs", [name], [f"{new}_abs"], name=f"{tag}_abs"),
            helper.make_node("LessOrEqual", [f"{new}_abs", limit], [f"{new}_fits"], name=f"{tag}_fits"),
            helper.make_node("Cast", [name], [f"{new}_half"], name=f"{tag}_to_fp16", to=TensorProto.FLOAT16),
            helper.make_node("Cast", [f"{new}_half"], [f"{new}_round"], name=f"{tag}_to_fp32", to=TensorProto.FLOAT),
            helper.make_node("Where", [f"{new}_fits", f"{new}_round", name], [new], name=f"{tag}_where"),
        ]
    nodes = [*rounding, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)


def is_floor_helper(name: str) -> bool:
    """True for tensors the floor transformation added (never compared)."""
    return FLOOR_SUFFIX in name
