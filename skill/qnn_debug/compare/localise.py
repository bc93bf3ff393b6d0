"""Find the ops where the target's error *jumps* beyond the fp16 floor, walking in execution order.

Each tensor gets an **excess**: how many dB its target SQNR falls short of the floor's SQNR (the floor is
capped, because HTP never does better than about fp16). An op is a **suspect** when its output's excess
exceeds the worst excess among its inputs by ``jump_db``: its inputs agree with the reference (relative to
the floor) and its output does not. Whether the op is really wrong is decided afterwards by its local error.

Tensors the target did not dump (fused away) get the excess of their producer's inputs, i.e. the unseen op
is presumed innocent; the suspect then carries the *segment* of unseen ops that a local re-run must
include. End-to-end error and cosine are never used here.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .criterion import SQNR
from .schema import MetricValues, TensorRow, TensorStatus
from .thresholds import Thresholds

if TYPE_CHECKING:
    from ..runstore import Run
    from .local_error import ModelIndex

TINY_ABS = 1e-7  # errors below this are noise whatever the relative numbers say (all-zero references)


@dataclass(frozen=True)
class OpNode:
    """An op in execution order. ``inputs`` excludes initializers and empty optional inputs."""

    position: int
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def ops_behind(producer: dict[str, OpNode], tensors: Iterable[str], visible: Container[str]) -> list[OpNode]:
    """The ops that compute ``tensors`` from the nearest visible tensors, in execution order.

    A walk upstream through producers that stops at every tensor the target exposes: the ops a local
    re-run must include, and the model nodes one fused target op covers.
    """
    found: dict[str, OpNode] = {}
    stack = [t for t in tensors if t not in visible]
    while stack:
        op = producer.get(stack.pop())
        if op is None or op.name in found:
            continue
        found[op.name] = op
        stack.extend(t for t in op.inputs if t not in visible)
    return sorted(found.values(), key=lambda o: o.position)


def downstream_ops(ops: Iterable[OpNode], start: OpNode) -> set[str]:
    """Names of the ops that read, directly or through others, what ``start`` computes (``start`` included):
    the only ops whose error can be inherited from it."""
    readers: dict[str, list[OpNode]] = {}
    for op in ops:
        for name in op.inputs:
            readers.setdefault(name, []).append(op)
    seen = {start.name}
    stack = list(start.outputs)
    while stack:
        for op in readers.get(stack.pop(), []):
            if op.name not in seen:
                seen.add(op.name)
                stack.extend(op.outputs)
    return seen


@dataclass
class TensorJudgement:
    excess_db: float | None  # None: cannot judge (reference not finite, empty tensor)
    status: TensorStatus


@dataclass
class Suspect:
    op: OpNode
    tensor: str  # the output with the largest excess
    excess_db: float
    input_excess_db: float
    jump_db: float
    segment: list[OpNode] = field(default_factory=list)  # unseen ops feeding ``op`` (not dumped), in order


def judge_tensor(metrics: MetricValues, floor_metrics: MetricValues | None, op_type: str | None,
                 th: Thresholds) -> TensorJudgement:
    """Excess over the (capped) floor and a status; op-specific absolute tolerances apply (Sigmoid, Softmax)."""
    if (metrics.get("ref_nonfinite") or 0) > 0:
        return TensorJudgement(None, "unknown")
    expected = SQNR.expected(floor_metrics, th)
    if (metrics.get("nan") or 0) + (metrics.get("inf") or 0) > 0:
        return TensorJudgement(max(expected, th.jump_db), "bad")
    sqnr, max_abs = SQNR.value(metrics), metrics.get("max_abs")
    if sqnr is None or max_abs is None:
        return TensorJudgement(None, "unknown")
    abs_tol = th.op_abs_tol.get(op_type or "", 0.0)
    if max_abs <= max(abs_tol, TINY_ABS):
        return TensorJudgement(0.0, "ok")
    excess = SQNR.excess(sqnr, expected)
    status: TensorStatus = "ok" if excess < th.excess_ok_db else ("degraded" if excess < th.jump_db else "bad")
    return TensorJudgement(excess, status)


def find_suspects(ops: list[OpNode], excess: dict[str, float | None], th: Thresholds,
                  exact: set[str] | frozenset[str] = frozenset()) -> tuple[list[Suspect], dict[str, float]]:
    """Suspects in execution order, and the jump of every judged op output.

    ``excess`` holds every aligned tensor (None = not judgeable); names absent from it were not
    dumped. Graph inputs absent from it count as exact (the target ran on the reference's inputs), and
    so do ``exact`` tensors (integer shape arithmetic, which float error cannot change).
    """
    producer = {o: op for op in ops for o in op.outputs}
    effective: dict[str, float] = {}

    def eff(name: str) -> float:
        if name in effective:
            return effective[name]
        if name in exact:
            return 0.0
        value = excess.get(name)
        if value is None:
            op = producer.get(name)
            value = max((eff(i) for i in op.inputs), default=0.0) if op is not None else 0.0
        effective[name] = value
        return value

    def feeders(op: OpNode) -> list[OpNode]:
        """Unseen ops between ``op`` and the nearest dumped tensors (the segment a re-run needs)."""
        return ops_behind(producer, op.inputs, excess)

    suspects: list[Suspect] = []
    jumps: dict[str, float] = {}
    for op in ops:
        in_excess = max((eff(i) for i in op.inputs), default=0.0)  # in order, so recursion stays shallow
        judged = [(excess[o], o) for o in op.outputs if excess.get(o) is not None]
        if not judged:
            continue
        out_excess, worst = max(judged, key=lambda x: float(x[0] or 0.0))
        jump = float(out_excess or 0.0) - in_excess
        for value, name in judged:
            jumps[name] = float(value or 0.0) - in_excess
        if float(out_excess or 0.0) >= th.jump_db and jump >= th.jump_db:
            suspects.append(Suspect(op, worst, float(out_excess or 0.0), in_excess, jump, feeders(op)))
    return suspects, jumps


def ops_without_graph(order: list[tuple[str, str | None, str | None, int]]) -> list[OpNode]:
    """Fallback when no ONNX model is available: each tensor is its own op, fed by the tensor before it.

    Graph edges are unknown, so "its inputs agree" becomes "everything earlier agrees". ``order`` holds
    (tensor, op, op_type, position) in execution order.
    """
    ops: list[OpNode] = []
    previous: tuple[str, ...] = ()
    for name, op, op_type, position in order:
        if position < 0:
            continue
        ops.append(OpNode(position, op or name, op_type or "?", previous, (name,)))
        previous = (*previous, name)[-64:]
    return ops


@dataclass
class Located:
    """The localise stage's output: the graph, the suspects in execution order, and whether they can be re-run."""

    ops: list[OpNode]  # in execution order (from the ONNX model, else one op per reference tensor)
    suspects: list[Suspect]
    index: ModelIndex | None  # for local re-runs; None when there is no model or re-runs are off
    local_note: str | None  # why there is no index
    non_float: set[str] = field(default_factory=set)  # integer tensors (shape arithmetic): never suspects
    consumers: dict[str, OpNode] = field(default_factory=dict)  # tensor -> the first op reading it

    def graph_tensors(self, rows: Iterable[str]) -> set[str]:
        """Tensors the target exposes or the graph is fed: where a fused target op's coverage stops."""
        produced = {o for op in self.ops for o in op.outputs}
        return set(rows) | {i for op in self.ops for i in op.inputs if i not in produced}


def localise(model: Any, reference: Run, rows: dict[str, TensorRow], th: Thresholds, *, local_checks: bool = True,
             model_note: str | None = None) -> Located:
    """Suspects where the excess over the floor jumps; each row's ``jump_db`` is filled in on the way."""
    ops, non_float, index, note = _graph(model, reference, local_checks, model_note)
    excess = {n: r.excess_db for n, r in rows.items()}
    for name in non_float:
        excess.pop(name, None)
    suspects, jumps = find_suspects(ops, excess, th, exact=non_float)
    for name, jump in jumps.items():
        if name in rows:
            rows[name].jump_db = round(jump, 2)
    consumers: dict[str, OpNode] = {}
    for op in ops:
        for name in op.inputs:
            consumers.setdefault(name, op)
    return Located(ops=ops, suspects=suspects, index=index, local_note=note, non_float=non_float,
                   consumers=consumers)


def _graph(model: Any, reference: Run, local_checks: bool,
           model_note: str | None) -> tuple[list[OpNode], set[str], ModelIndex | None, str | None]:
    """Ops in execution order, non-float tensor names, a ModelIndex for re-runs, and why none."""
    if model is None:
        order = [(t.name, t.op, t.op_type, t.position) for t in reference.iter_in_order()]
        return ops_without_graph(order), set(), None, model_note or "no ONNX model"
    from ..onnx_graph import initializer_names, nodes_in_order
    from .local_error import ModelIndex

    index = ModelIndex.build(model)
    inits = initializer_names(index.model)
    ops = [OpNode(n.position, n.name, n.op_type, tuple(i for i in n.inputs if i and i not in inits), n.outputs)
           for n in nodes_in_order(index.model)]
    non_float = {name for name in index.elem_types if not index.is_float(name)}
    return ops, non_float, index if local_checks else None, None if local_checks else "local checks switched off"
