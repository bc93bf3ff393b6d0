"""What to capture from an ONNX model and how to write it: shared by ORT CPU, the floor and the simulator.

Every ONNX-based run records the same names in the same way, so runs align by name:
graph inputs first (``kind="input"``, position -1), then every float node output with the producing
node's name, type and index in execution order (``kind="output"`` for graph outputs). Outputs of
constant producers (Constant, Shape, ...) and integer shape arithmetic are not captured: they are not
numerics a backend can get wrong in an interesting way, and marking them on QNN only adds nodes.

For QDQ models the simulator can only expose the QuantizeLinear outputs (marking the float tensor
before a Q node makes the weight DequantizeLinear nodes fall back to CPU), so :func:`qdq_points`
lists, for each activation Q node, the float tensor it quantizes and its scale / zero point.

fp16 runs on the simulator export *float16 views* (:func:`half_views`): a ``Cast(FLOAT16)`` after
each float32 tensor, marked instead of the tensor. Measured (soc 69, one process per variant,
interleaved, 5 rounds; deep_conv_net(24), PP-OCR cls 48x192, det 96x96): the marked run is 1.6-2.1x
faster and its session 1.3-1.5x faster to create, peak RSS 6-20 MB lower, the observer effect is
unchanged, and each value is the float32 export rounded to fp16 (the float32 export is the fp16 value
plus one float32 ulp from the simulator's output conversion; a few GlobalAveragePool/Reshape outputs
carry more than fp16 precision, which the view rounds away). The Cast turns values beyond ±65504 into
NaN where the float32 export shows the value, so :func:`needs_float32` finds such views and the caller
fetches them as float32. Views keep the model's NCHW layout: an NHWC view (``Transpose(0,2,3,1)`` with
the Cast, which cancels the EP's layout Transposes) ran 10-30% faster still but changed the marked
graph's numerics (PP-OCR cls observer effect 69.3 -> 58.2 dB, det tensors off by up to 20).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInputError, TargetError, flatten_message
from ..runstore import ModelInfo, RunWriter, TensorKind, sha256_file

if TYPE_CHECKING:
    import numpy as np
    import onnx

_CONSTANT_PRODUCERS = {"Constant", "ConstantOfShape", "Shape", "Size"}
_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
HALF_VIEW_SUFFIX = "__qd_fp16_view"
HALF_VIEW_NOTE = "exported by the target as a float16 view (Cast after the tensor), stored as float32; layout unchanged"
FP16_MAX = 65504.0


@dataclass(frozen=True)
class PlannedTensor:
    """A tensor a run will capture, with the provenance every run records for it."""

    name: str
    op: str | None
    op_type: str | None
    position: int
    kind: TensorKind


@dataclass(frozen=True)
class QdqPoint:
    """An activation QuantizeLinear node: the float tensor it quantizes and how."""

    float_name: str  # the Q node's input: the name the reference run uses
    q_output: str  # the Q node's output: what the simulator can expose
    scale: float | list[float]
    zero_point: int | list[int]
    axis: int | None
    q_dtype: str


def float_types() -> set[int]:
    from onnx import TensorProto

    return {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}


def capture_plan(model: onnx.ModelProto) -> list[PlannedTensor]:
    """Graph inputs, then every float node output (plus every graph output), in execution order.

    Outputs whose type shape inference cannot tell (ops of the com.microsoft domain, e.g. 16-bit
    QDQ) are planned too; :func:`write_plan` drops them if they turn out not to be float.
    """
    from ..onnx_graph import graph_inputs, nodes_in_order, tensor_elem_types

    floats = float_types()
    types = tensor_elem_types(model)
    outputs = {o.name for o in model.graph.output}
    plan = [PlannedTensor(s.name, None, None, -1, "input") for s in graph_inputs(model)]
    seen = {p.name for p in plan}
    for node in nodes_in_order(model):
        for name in node.outputs:
            if name in seen:
                continue
            is_output = name in outputs
            elem = types.get(name)
            if not is_output and (node.op_type in _CONSTANT_PRODUCERS or (elem is not None and elem not in floats)):
                continue
            seen.add(name)
            plan.append(PlannedTensor(name, node.name, node.op_type, node.position, "output" if is_output else "activation"))
    return plan


def is_qdq_model(model: onnx.ModelProto) -> bool:
    """True when the graph carries QuantizeLinear/DequantizeLinear nodes (a QDQ-quantized model)."""
    return any(n.op_type in _QDQ_OPS for n in model.graph.node)


def qdq_points(model: onnx.ModelProto) -> list[QdqPoint]:
    """Every QuantizeLinear whose input is an activation or graph input (weights are skipped)."""
    import numpy as np
    from onnx import numpy_helper

    from ..onnx_graph import initializer_names

    inits = {i.name: i for i in model.graph.initializer}
    consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant" and n.output}
    weights = initializer_names(model) | set(consts)

    def value(name: str, what: str, q_node: str) -> np.ndarray:
        if name in inits:
            return np.asarray(numpy_helper.to_array(inits[name]))
        if name in consts:
            for attr in consts[name].attribute:
                if attr.name == "value":
                    return np.asarray(numpy_helper.to_array(attr.t))
        raise BadInputError(
            f"QuantizeLinear {q_node!r} takes its {what} from {name!r}, which is not a constant",
            hint="quantize the model with static (constant) scales and zero points",
        )

    points: list[QdqPoint] = []
    seen: set[str] = set()
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in weights or node.input[0] in seen:
            continue
        seen.add(node.input[0])
        scale = value(node.input[1], "scale", node.name)
        if len(node.input) > 2 and node.input[2]:
            zp = value(node.input[2], "zero point", node.name)
            q_dtype = str(zp.dtype)
        else:
            zp, q_dtype = np.zeros_like(scale, dtype=np.int64), "uint8"
        axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 1) if scale.size > 1 else None
        points.append(QdqPoint(
            float_name=node.input[0],
            q_output=node.output[0],
            scale=float(scale) if scale.size == 1 else [float(s) for s in scale.ravel()],
            zero_point=int(zp) if zp.size == 1 else [int(z) for z in zp.ravel()],
            axis=axis,
            q_dtype=q_dtype,
        ))
    return points


def model_info(path: str | os.PathLike[str], model: onnx.ModelProto) -> ModelInfo:
    from ..onnx_graph import graph_inputs, graph_outputs

    return ModelInfo(path=str(Path(path).resolve()), sha256=sha256_file(path), format="onnx",
                     inputs=graph_inputs(model), outputs=graph_outputs(model))


def run_on_cpu(model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: list[str], *,
               optimize: bool = True, points: list[QdqPoint] | None = None) -> dict[str, np.ndarray]:
    """Run ``model`` with ``names`` marked as outputs on ORT's CPU EP and return them by name.

    ``optimize=False`` (ORT_DISABLE_ALL) keeps QDQ models in float "fake-quant" form: ORT's integer
    QDQ kernels saturate on AVX2 hosts without VNNI (18 dB where HTP gives 38 dB), so they are never
    a valid reference.
    """
    import onnxruntime as ort

    marked = mark_for_capture(model, names, points or [])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(serialize(marked), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise BadInputError(f"ONNX Runtime cannot load the model: {one_line(e)}",
                            hint="check the model with onnx.checker, or re-export it") from None
    wanted = [o.name for o in session.get_outputs()]
    try:
        values = session.run(wanted, feeds)
    except Exception as e:
        raise TargetError(f"ONNX Runtime CPU failed to run the model: {one_line(e)}",
                          hint="check the input shapes and dtypes") from None
    return dict(zip(wanted, values, strict=True))


def serialize(model: onnx.ModelProto) -> bytes:
    return bytes(model.SerializeToString())


def one_line(e: BaseException) -> str:
    """An exception's message on one line (ORT and QNN errors span many lines)."""
    return flatten_message(str(e), 400)


def half_views(model: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """Tensor → name of its float16 view, for each float32 tensor of ``names`` that is not a graph output.

    Graph outputs stay float32 (they are compared with an unmarked run); other dtypes are marked as
    they are. :func:`mark_for_capture` adds the Cast nodes.
    """
    from onnx import TensorProto

    from ..onnx_graph import tensor_elem_types

    opset = next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 1)
    if opset < 6:  # Cast took a string 'to' before opset 6
        return {}
    types = tensor_elem_types(model)
    outputs = {o.name for o in model.graph.output}
    taken = {t for n in model.graph.node for t in [*n.input, *n.output]} | {i.name for i in model.graph.input}
    views: dict[str, str] = {}
    for name in dict.fromkeys(names):
        if name in outputs or types.get(name) != TensorProto.FLOAT:
            continue
        view = f"{name}{HALF_VIEW_SUFFIX}"
        while view in taken:
            view += "_"
        taken.add(view)
        views[name] = view
    return views


def mark_for_capture(model: onnx.ModelProto, names: list[str], points: list[QdqPoint], *,
                     views: dict[str, str] | None = None) -> onnx.ModelProto:
    """``mark_all`` of ``names`` plus the Q outputs of ``points``, the latter with their integer type set.

    ``views`` (from :func:`half_views`) adds ``Cast(FLOAT16)`` after each of its tensors and marks the
    Cast output; a tensor can be in both ``names`` and ``views``. Q outputs of com.microsoft QDQ nodes
    have no inferred type, and the QNN EP needs one.
    """
    import numpy as np
    from onnx import TensorProto, helper

    from ..onnx_graph import mark_all

    base = model
    if views:
        base = copy.deepcopy(model)
        node_names = {n.name for n in base.graph.node}
        for i, (name, view) in enumerate(views.items()):
            node_name = f"qd_fp16_view_{i}"
            while node_name in node_names:
                node_name += "_"
            base.graph.node.append(helper.make_node("Cast", [name], [view], name=node_name, to=TensorProto.FLOAT16))
    wanted = list(dict.fromkeys([*names, *(views or {}).values(), *(p.q_output for p in points)]))
    marked = mark_all(base, wanted)
    q_types = {p.q_output: helper.np_dtype_to_tensor_dtype(np.dtype(p.q_dtype)) for p in points}
    q_types.update({view: TensorProto.FLOAT16 for view in (views or {}).values()})
    for out in marked.graph.output:
        if out.name in q_types and not out.type.tensor_type.elem_type:
            out.CopyFrom(helper.make_tensor_value_info(out.name, q_types[out.name], None))
    return marked


def needs_float32(view: np.ndarray) -> bool:
    """True when a float16 view may not hold the tensor's value: NaN/Inf, or ±65504 (the Cast overflowed)."""
    import numpy as np

    a = np.asarray(view)
    return bool(a.size) and not (np.isfinite(a).all() and float(np.abs(a).max()) < FP16_MAX)


def write_plan(writer: RunWriter, plan: list[PlannedTensor], values: dict[str, Any], feeds: dict[str, np.ndarray], *,
               points: list[QdqPoint] | None = None, quantized_only: bool = False, advance: Any = None,
               half: set[str] | None = None) -> list[str]:
    """Store the planned tensors that were produced; returns the names that were missing.

    A tensor quantized by a QDQ point is stored as its *dequantized Q output* (raw integers plus
    scale/offset) under the float tensor's name: that is the value the rest of a QDQ graph sees, and
    what both the simulator and the fake-quant reference expose. With ``quantized_only`` (the
    simulator) other activations are skipped; non-float activations are always skipped. ``values`` of
    the tensors in ``half`` are float16 views: they are stored as float32 with ``source_dtype`` float16.
    """
    import numpy as np

    by_float = {p.float_name: p for p in points or []}
    missing: list[str] = []
    for p in plan:
        point = by_float.get(p.name)
        if point is not None and point.q_output in values:
            _add_quantized(writer, p, point, np.asarray(values[point.q_output]))
        elif quantized_only and p.kind == "activation":
            continue
        else:
            arr = feeds.get(p.name) if p.kind == "input" else values.get(p.name)
            if arr is None:
                missing.append(p.name)
                continue
            arr = np.asarray(arr)
            if p.kind == "activation" and arr.dtype.kind != "f":
                continue
            if half and p.name in half and arr.dtype == np.float16:
                writer.add_tensor(p.name, arr.astype(np.float32), op=p.op, op_type=p.op_type, position=p.position,
                                  kind=p.kind, source_dtype="float16", layout_note=HALF_VIEW_NOTE)
            else:
                writer.add_tensor(p.name, arr, op=p.op, op_type=p.op_type, position=p.position, kind=p.kind)
        if advance is not None:
            advance()
    return missing


def dequantize(raw: np.ndarray, point: QdqPoint) -> np.ndarray:
    """ONNX's ``(q - zero_point) * scale``, per tensor or along ``point.axis``."""
    import numpy as np

    scale = np.asarray(point.scale, dtype=np.float64)
    zp = np.asarray(point.zero_point, dtype=np.int64)
    if point.axis is not None and raw.ndim:
        bshape = [1] * raw.ndim
        bshape[point.axis % raw.ndim] = -1
        scale, zp = scale.reshape(bshape), zp.reshape(bshape)
    return np.asarray(((raw.astype(np.int64) - zp) * scale).astype(np.float32))


def _add_quantized(writer: RunWriter, p: PlannedTensor, point: QdqPoint, raw: np.ndarray) -> None:
    offset = [-z for z in point.zero_point] if isinstance(point.zero_point, list) else -point.zero_point
    writer.add_tensor(p.name, dequantize(raw, point), op=p.op, op_type=p.op_type, position=p.position, kind=p.kind,
                      target_name=point.q_output, source_dtype=str(raw.dtype), raw=raw, scale=point.scale,
                      offset=offset, axis=point.axis, label="dequantized QuantizeLinear output")
