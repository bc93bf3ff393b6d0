"""Re-run one op (or the few ops the target fused away) on ORT CPU with the TARGET's own inputs.

This splits local from accumulated error (ORT's qdq_loss_debug idea, QAIRT's layerwise mode): the op
is cut out of the reference model with its initializers, fed exactly what the target fed it, and its
result is compared with what the target produced. A large local error means the op itself computed
something else; a small one means the damage came from upstream or is precision. The same op through
the fp16 floor on the same inputs gives the noise to expect.

ONNX Runtime's CPU provider never prints to stdout, so this runs in the calling process.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..onnx_graph import fp16_floor, np_dtype_name, tensor_elem_types
from .criterion import SQNR
from .metrics import error_stats, metric_values
from .schema import LocalError
from .thresholds import Thresholds

MAX_SEGMENT_NODES = 64
Fetch = Callable[[str], tuple[np.ndarray, str] | None]  # tensor name → (values in model layout, source)


class LocalRunError(Exception):
    """The segment could not be cut out or run; the message says why (reported, never raised to users)."""


@dataclass
class ModelIndex:
    """Lookups into the reference ONNX model, built once per comparison."""

    model: onnx.ModelProto
    elem_types: dict[str, int]
    initializers: dict[str, TensorProto]
    nodes: dict[str, onnx.NodeProto]  # by node name
    graph_inputs: set[str]

    @classmethod
    def build(cls, model: onnx.ModelProto) -> ModelIndex:
        from ..onnx_graph import ensure_node_names

        m = ensure_node_names(model)
        inits = {i.name: i for i in m.graph.initializer}
        return cls(m, tensor_elem_types(m), inits, {n.name: n for n in m.graph.node},
                   {i.name for i in m.graph.input if i.name not in inits})

    def is_float(self, name: str) -> bool:
        return self.elem_types.get(name) in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
                                             TensorProto.BFLOAT16)


@dataclass
class Segment:
    nodes: list[onnx.NodeProto]  # execution order; the suspect op last
    boundary: list[str]  # tensors fed from outside (dumped tensors or graph inputs)
    outputs: list[str]  # the suspect op's outputs


@dataclass
class LocalRun:
    """A cut-out segment with the target's inputs: re-runnable with other semantics (see ``patterns``)."""

    index: ModelIndex
    segment: Segment
    feeds: dict[str, np.ndarray]
    sources: dict[str, str]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def op(self) -> onnx.NodeProto:
        return self.segment.nodes[-1]

    def rerun(self, *, nodes: Sequence[onnx.NodeProto] | None = None, feeds: dict[str, np.ndarray] | None = None,
              initializers: dict[str, np.ndarray] | None = None, floor: bool = False,
              outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Run the segment again, optionally with edited nodes, feeds or initializer values."""
        wanted = outputs or self.segment.outputs
        model = segment_model(self.index, list(nodes or self.segment.nodes), self.segment.boundary,
                              wanted, feeds or self.feeds, initializers)
        if floor:
            model = fp16_floor(model)
        return run_cpu(model, feeds or self.feeds, wanted)


def _node_inputs(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs plus names a subgraph (If/Loop/Scan body) reads from the outer scope."""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            defined = {i.name for i in g.input} | {i.name for i in g.initializer}
            for inner in g.node:
                for name in _node_inputs(inner):
                    if name not in defined:
                        names.append(name)
                defined.update(o for o in inner.output if o)
    return names


def build_segment(index: ModelIndex, op_names: Sequence[str]) -> Segment:
    """The named ops (execution order, suspect last) with the tensors they need from outside."""
    nodes = []
    for name in op_names:
        node = index.nodes.get(name)
        if node is None:
            raise LocalRunError(f"op {name!r} is not in the model")
        nodes.append(node)
    if len(nodes) > MAX_SEGMENT_NODES:
        raise LocalRunError(f"{len(nodes)} ops between dumped tensors; too many to re-run as one segment")
    produced = {o for n in nodes for o in n.output if o}
    boundary: list[str] = []
    for n in nodes:
        for name in _node_inputs(n):
            if name in produced or name in index.initializers or name in boundary:
                continue
            boundary.append(name)
    return Segment(nodes, boundary, [o for o in nodes[-1].output if o])


def segment_model(index: ModelIndex, nodes: list[onnx.NodeProto], boundary: list[str], outputs: list[str],
                  feeds: dict[str, np.ndarray], initializers: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A standalone model of ``nodes`` whose inputs are ``boundary`` (typed from ``feeds``)."""
    from onnx import numpy_helper

    used = {name for n in nodes for name in _node_inputs(n)}
    inits = []
    for name in sorted(used & set(index.initializers)):
        if initializers and name in initializers:
            inits.append(numpy_helper.from_array(np.asarray(initializers[name]), name))
        else:
            inits.append(index.initializers[name])
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), list(feeds[n].shape))
              for n in boundary]
    outs = [helper.make_tensor_value_info(o, index.elem_types.get(o, TensorProto.UNDEFINED), None) for o in outputs]
    graph = helper.make_graph([copy.deepcopy(n) for n in nodes], "qnn_debug_local", inputs, outs, inits)
    m = helper.make_model(graph, opset_imports=list(index.model.opset_import))
    m.ir_version = index.model.ir_version
    m.functions.extend(index.model.functions)
    return m


def run_cpu(model: onnx.ModelProto, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        session = ort.InferenceSession(model.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
        values = session.run(outputs, {k: v for k, v in feeds.items() if k in {i.name for i in session.get_inputs()}})
    except Exception as e:
        raise LocalRunError(" ".join(f"ONNX Runtime could not re-run the op: {e}".split())[:400]) from None
    return {name: np.asarray(v) for name, v in zip(outputs, values, strict=True)}


def prepare(index: ModelIndex, op_names: Sequence[str], fetch: Fetch) -> LocalRun:
    """Cut the segment and gather its inputs (the target's values where it has them)."""
    segment = build_segment(index, op_names)
    feeds: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for name in segment.boundary:
        got = fetch(name)
        if got is None:
            raise LocalRunError(f"input {name!r} of the segment is in neither the target nor the reference")
        values, source = got
        elem = index.elem_types.get(name)
        dtype = np.dtype(np_dtype_name(elem)) if elem and not np_dtype_name(elem).startswith("onnx:") else values.dtype
        feeds[name] = np.ascontiguousarray(values.astype(dtype, copy=False))
        sources[name] = source
    run = LocalRun(index, segment, feeds, sources)
    run.outputs = run.rerun()
    return run


def measure(run: LocalRun, tensor: str, target_out: np.ndarray, *, op_type: str, quant_scale: float | None,
            th: Thresholds) -> LocalError:
    """Local error of ``tensor``: target output vs the segment re-run on the target's inputs."""
    local = run.outputs[tensor]
    if local.size != target_out.size:
        return LocalError(note=f"re-run gives {list(local.shape)}, target has {list(target_out.shape)}",
                          segment=[n.name for n in run.segment.nodes], inputs=run.sources)
    stats = error_stats(target_out.reshape(local.shape), local, atol=th.atol, rtol=th.rtol)
    values = metric_values(stats)
    expected = None
    try:
        floor_out = run.rerun(floor=True)[tensor]
        expected = metric_values(error_stats(floor_out, local))["sqnr_db"]
    except Exception:  # the expected level is optional; the floor transform may not fit every op
        expected = None
    le = LocalError(
        sqnr_db=values["sqnr_db"], rel_l2=values["rel_l2"], max_abs=values["max_abs"], diff_rate=values["diff_rate"],
        expected_sqnr_db=expected, segment=[n.name for n in run.segment.nodes], inputs=run.sources,
    )
    if quant_scale and le.max_abs is not None:
        le.max_err_lsb = float(f"{le.max_abs / quant_scale:.4g}")
    if stats.nonfinite_target and not stats.nonfinite_reference:
        le.ok, le.note = False, f"{stats.nonfinite_target} NaN/Inf in the target where the re-run is finite"
    else:
        le.ok = local_ok(le, op_type, quantized=quant_scale is not None, th=th)
    return le


def local_ok(le: LocalError, op_type: str, *, quantized: bool, th: Thresholds) -> bool:
    """The op did its job on the inputs it got: within precision (fp16) or a few steps (quantized)."""
    if le.sqnr_db is None:
        return (le.max_abs or 0.0) == 0.0
    if le.max_abs is not None and le.max_abs <= th.op_abs_tol.get(op_type, 0.0):
        return True
    return (SQNR.local_ok(le.sqnr_db, le.expected_sqnr_db, quantized=quantized, th=th)
            or (quantized and le.max_err_lsb is not None and le.max_err_lsb <= th.quant_lsb_ok))


def local_limit_db(le: LocalError, th: Thresholds) -> float:
    """The local SQNR an fp16 op must reach; an op whose own fp16 floor is poor is allowed that much less."""
    return SQNR.local_limit(le.expected_sqnr_db, th)

