"""Where a comparison meets the fp16 range: the first op whose reference output leaves it, and what the
target holds there.

An op whose reference output exceeds 65504 while its inputs fit cannot be run by any fp16 engine: HTP
saturates at 131008 (no inf), an IEEE producer gives inf, the fp16 floor clips at 65504. Its local re-run
(fp32 on the target's inputs) then disagrees by a lot, which looks like a wrong op; it is not — the model
is not fp16-safe there. The finding names that op, the reference's magnitude, and how much of the target
sits at the rail, so the verdict can say ``precision`` / ``fp16_range`` with numbers
(range saturation: nothing need be NaN or inf).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runstore import Run
from .localise import OpNode
from .rail import RailJudge
from .ranges import FP16_MAX, HTP_FP16_MAX, first_overflows, max_abs
from .schema import TensorRow

NEAR_RAIL = 0.9  # a target whose largest magnitude reaches 90 % of 65504 sits at (or near) the fp16 rail
AT_RAIL = 0.999  # an element this close to the rail counts as saturated
POOR_SQNR_DB = 30.0  # near the rail but not saturated: only a finding when the value is also badly off
HEADROOM = 4.0  # rescale so that the largest value lands a factor 4 below 65504
SQUARING_OPS = {"ReduceSumSquare", "ReduceL2", "Pow"}
# ops whose output is a sum over many inputs: averaging instead of summing keeps the partial results in range
REDUCING_OPS = {"ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceL1", "ReduceLogSumExp", "MatMul", "Gemm", "Conv",
                "ConvTranspose", "Einsum", "GlobalAveragePool"}  # outputs grow with the square of the input scale
CONSTANT_OPS = {"Constant", "ConstantOfShape"}
# Where fp16 producers stop: IEEE's largest finite value (and a clipping floor), 2**16 (measured: the simulator's
# MatMul tops out at 65536, code 0x7C00), and HTP's saturation code 0x7FFF.
RAILS = (FP16_MAX, 65536.0, HTP_FP16_MAX)


@dataclass
class InnerOverflow:
    """A tensor the target computes inside one model op (MNN lowers ReduceSumSquare to a square and a sum): the
    first place the run leaves the fp16 range, before the model op's own output."""

    tensor: str  # the target's tensor name (e.g. MNN's ``BinaryOp3``)
    op: str | None  # the target's op computing it
    op_type: str | None
    target_max: float
    at_rail: int
    size: int

    def evidence(self) -> dict[str, Any]:
        return {"target_tensor": self.tensor, "target_op": self.op, "target_op_type": self.op_type,
                "target_max_abs": _g(self.target_max), "target_at_rail": self.at_rail, "elements": self.size}


@dataclass
class Overflow:
    """The first op that leaves the fp16 range, with the target's numbers there."""

    op: OpNode
    tensor: str
    ref_max: float  # max |reference| of the op's output
    input_max: float  # largest max |reference| among its float inputs
    row: TensorRow | None  # the target's first observation of the tensor (None: not dumped)
    target_max: float | None = None
    nonfinite: int = 0
    rail: float | None = None  # 131008 (HTP saturation) or 65504 (IEEE / a clipping floor)
    at_rail: int = 0  # target elements at the rail (saturated, or inf)
    ref_beyond: int = 0  # reference elements beyond 65504
    size: int = 0
    squaring: bool = False  # the op squares its input (sum of squares, Pow 2, x*x)
    later_unsafe: int = 0  # further tensors beyond 65504 downstream
    downstream: list[str] | None = None  # op types that consume the overflowing value (nearest first)
    source: str | None = None  # the op's first float input: what a rescale multiplies
    region_max: float = 0.0  # the largest reference value from the op up to the normalisation (what a rescale must fit)
    region_tensor: str | None = None  # ... and the tensor that reaches it
    producer: OpNode | None = None  # the op computing ``source`` (None: a graph input)
    uses_inside: list[str] = field(default_factory=list)  # ops reading ``source`` inside the scale-invariant region
    uses_outside: list[str] = field(default_factory=list)  # ops reading ``source`` that a rescale must not reach
    inner: InnerOverflow | None = None  # the target's own tensor inside the op that leaves the range first
    centered: bool = False  # what is squared is x - mean(x): a decomposed LayerNorm, not an RMSNorm
    shipped: dict[str, Any] | None = None  # whether the converted model (.mnn) has this tensor at all (:mod:`.shipped`)

    @property
    def dumped(self) -> bool:
        return self.row is not None

    def rescale_exponent(self) -> int:
        """k such that scaling the op's input by 2**-k brings the largest value of the region it starts (up to the
        normalisation: the sum of squares after the square, not just the square) below 65504 / HEADROOM."""
        factor = max(self.ref_max, self.region_max) * HEADROOM / FP16_MAX
        k = math.log2(max(factor, 1.0))
        return max(1, math.ceil(k / 2 if self.squaring else k))

    def evidence(self) -> dict[str, Any]:
        return {"op": self.op.name, "op_type": self.op.op_type, "position": self.op.position, "tensor": self.tensor,
                "reference_max_abs": _g(self.ref_max), "inputs_max_abs": _g(self.input_max),
                "fp16_max": FP16_MAX, "htp_saturation": HTP_FP16_MAX, "dumped": self.dumped,
                "target_max_abs": _g(self.target_max), "target_nonfinite": self.nonfinite,
                "rail": self.rail, "target_at_rail": self.at_rail, "reference_beyond_fp16": self.ref_beyond,
                "elements": self.size, "rescale_exponent": self.rescale_exponent(), "squaring": self.squaring,
                "later_unsafe_tensors": self.later_unsafe, "downstream_op_types": self.downstream or [],
                "rescale_input": self.source,
                "scale_invariant": "LayerNorm" if self.centered and scale_invariant(
                    self.op.op_type, self.downstream or []) else scale_invariant(self.op.op_type, self.downstream or []),
                "shift_invariant": shift_invariant(self.op.op_type, self.downstream or []),
                "reduction": self.op.op_type in REDUCING_OPS or self.squaring,
                "region_max_abs": _g(max(self.ref_max, self.region_max)),
                "region_max_tensor": self.region_tensor or self.tensor,
                "rescale_producer": self.producer.name if self.producer is not None else None,
                "rescale_producer_type": self.producer.op_type if self.producer is not None else None,
                "rescale_uses_inside": self.uses_inside, "rescale_uses_outside": self.uses_outside,
                **({"inside_op": self.inner.evidence()} if self.inner is not None else {}),
                **({"shipped": self.shipped} if self.shipped is not None else {})}


# Ops whose result does not change (up to eps) when their input is multiplied by a constant: the place to
# rescale by a power of two (exact in fp16) without touching the rest of the model.
_NORMALIZING = {"Sqrt", "Div", "Reciprocal", "LpNormalization", "ReduceL2"}


def scale_invariant(op_type: str, downstream: list[str]) -> str | None:
    """Name of the scale-invariant construct the overflow sits in, if recognisable. A Softmax is not one: it is
    shift-invariant (softmax(x - c) = softmax(x)), never scale-invariant (see :func:`shift_invariant`)."""
    seen = [op_type, *downstream]
    if "LayerNormalization" in seen:
        return "LayerNorm"
    if "Softmax" in seen[:3]:
        return None
    if any(t in _NORMALIZING for t in seen):
        return "RMSNorm" if "ReduceMean" in seen else "L2-norm"
    return None


def shift_invariant(op_type: str, downstream: list[str]) -> str | None:
    """"Softmax input" when the overflowing value feeds a Softmax within two ops: a constant shift leaves it
    unchanged, a rescale does not."""
    return "Softmax input" if "Softmax" in [op_type, *downstream][:3] else None


def _g(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def reference_maxima(rows: list[TensorRow], reference: Run) -> dict[str, float]:
    """max|reference| per tensor: from the comparison's own statistics where it has them, else read."""
    out: dict[str, float] = {}
    for row in rows:
        m = row.metrics.get("max_abs_ref")
        if m is not None:
            out.setdefault(row.stands_for or row.name, float(m))
    for rec in reference.tensors:
        if rec.name not in out:
            arr = reference.array(rec.name)
            if arr.dtype.kind == "f" and arr.size:
                out[rec.name] = max_abs(arr)
    return out


def _squaring(op: OpNode, model_nodes: Mapping[str, Any] | None) -> bool:
    if op.op_type in SQUARING_OPS:
        return True
    node = (model_nodes or {}).get(op.name)
    return op.op_type == "Mul" and node is not None and len(node.input) == 2 and node.input[0] == node.input[1]


def find_overflow(ops: list[OpNode], rows: Mapping[str, TensorRow], maxima: Mapping[str, float], reference: Run,
                  target: Run, *, model_nodes: Mapping[str, Any] | None = None,
                  rail: RailJudge | None = None) -> Overflow | None:
    """The first op leaving the fp16 range whose target is at the rail (or, not dumped, broken downstream) and
    whose difference reaches something that depends on it (``rail`` keeps the ones nothing downstream feels:
    a masked Softmax input, a clamped value; they never stop the search).

    HTP holds values up to 131008 (exponent-31 codes), so when the first op beyond 65504 is held correctly
    the search continues with 131008 as the limit."""
    for limit in (FP16_MAX, HTP_FP16_MAX):
        found = _find(ops, rows, maxima, reference, target, model_nodes, limit, rail)
        if found is not None:
            return found
    return None


def _find(ops: list[OpNode], rows: Mapping[str, TensorRow], maxima: Mapping[str, float], reference: Run,
          target: Run, model_nodes: Mapping[str, Any] | None, limit: float,
          rail: RailJudge | None = None) -> Overflow | None:
    first = first_overflows(((op.name, op.inputs, op.outputs) for op in ops if op.op_type not in CONSTANT_OPS),
                            maxima, limit)
    if not first:  # the usual case: no op leaves the range, so the graph maps below are not needed
        return None
    by_name = {op.name: op for op in ops}
    consumers: dict[str, list[OpNode]] = {}
    for op in ops:
        for i in op.inputs:
            consumers.setdefault(i, []).append(op)
    origins = [(by_name[n], t) for n, t in first]
    unsafe = [n for n, m in maxima.items() if m > FP16_MAX and not (rail is not None and rail.found.get(n))]
    producer = {o: op for op in ops for o in op.outputs}
    for op, tensor in origins:
        if rail is not None and rail.harmless(tensor, maxima[tensor]) is not None:
            continue  # at the rail, but nothing downstream feels it: a note, never the finding
        source = next((i for i in op.inputs if i in maxima), op.inputs[0] if op.inputs else None)
        squaring = _squaring(op, model_nodes)
        before = producer.get(source) if source is not None else None
        if not squaring and before is not None and _squaring(before, model_nodes) and before.inputs:
            source, squaring = before.inputs[0], True  # a sum of squares: rescale what is squared
        found = Overflow(op=op, tensor=tensor, ref_max=maxima[tensor],
                         input_max=max((maxima.get(i, 0.0) for i in op.inputs), default=0.0),
                         row=rows.get(tensor), squaring=squaring,
                         later_unsafe=max(0, len(unsafe) - 1), downstream=_downstream(tensor, consumers),
                         source=source, producer=producer.get(source) if source is not None else None)
        found.centered = _centered(found.source, producer)
        _region(found, consumers, maxima)
        if found.row is None:
            later = [r for r in rows.values() if r.position >= op.position and r.status == "bad"]
            if later:
                return found
            continue
        _measure(found, reference, target)
        poor = (found.row.metrics.get("sqnr_db") or 0.0) < POOR_SQNR_DB
        near = found.target_max is not None and found.target_max >= NEAR_RAIL * FP16_MAX
        if found.nonfinite or (near and (found.at_rail or poor)):
            found.inner = _inner(found, rows, reference, target)
            return found
    return None


def _centered(source: str | None, producer: Mapping[str, OpNode]) -> bool:
    """``source`` is ``Sub(x, ReduceMean(x))``: the squared value is centred, as in a decomposed LayerNorm."""
    sub = producer.get(source) if source is not None else None
    if sub is None or sub.op_type != "Sub" or len(sub.inputs) != 2:
        return False
    mean = producer.get(sub.inputs[1])
    return mean is not None and mean.op_type == "ReduceMean" and sub.inputs[0] in mean.inputs


# Where a scale-invariant region ends: its output no longer grows with the input's scale.
_REGION_ENDS = _NORMALIZING | {"Softmax", "LayerNormalization", "ReduceL2"}
REGION_OPS = 8  # how far downstream the region is followed


def _region(found: Overflow, consumers: Mapping[str, list[OpNode]], maxima: Mapping[str, float]) -> None:
    """The largest value from the overflowing op up to the normalisation, and which readers of the rescaled
    input sit inside that region (a rescale must reach all of those and none of the others)."""
    order = [found.tensor]  # breadth first: on a tie (x + eps) the earlier tensor is named
    region = {found.tensor}
    ends: set[str] = set()  # the normaliser's outputs (the norm a Div divides by)
    frontier, ops_seen = [found.tensor], 0
    while frontier and ops_seen < REGION_OPS:
        nxt: list[str] = []
        for name in frontier:
            for op in consumers.get(name, []):
                ops_seen += 1
                if op.op_type in _REGION_ENDS:
                    ends.update(op.outputs)
                    continue
                for out in op.outputs:
                    if out not in region:
                        region.add(out)
                        order.append(out)
                        nxt.append(out)
        frontier = nxt
    top = max(order, key=lambda t: maxima.get(t, 0.0))
    found.region_max, found.region_tensor = maxima.get(top, 0.0), top
    if found.source is None:
        return
    reached = region | _norms(ends, consumers)
    for op in {op.name: op for op in consumers.get(found.source, [])}.values():  # x*x lists its reader twice
        inside = op.name == found.op.name or any(o in region or o in found.op.inputs for o in op.outputs) or any(
            i in reached for i in op.inputs if i != found.source)
        (found.uses_inside if inside else found.uses_outside).append(op.name)


def _norms(ends: set[str], consumers: Mapping[str, list[OpNode]]) -> set[str]:
    """The normaliser's outputs and what inverts them alone (``Div(1, Sqrt(..))``, ``Reciprocal``): what the
    readers inside the region multiply or divide the rescaled value by."""
    out = set(ends)
    for t in list(ends):
        for op in consumers.get(t, []):
            if op.op_type in _NORMALIZING and all(i in out for i in op.inputs):
                out.update(op.outputs)
    return out


def _inner(found: Overflow, rows: Mapping[str, TensorRow], reference: Run, target: Run) -> InnerOverflow | None:
    """The first tensor the target holds between the op's inputs and its output (a tensor of the target's own
    lowering of the op, which the reference does not have) that sits at the rail."""
    if found.row is None or not target.has(found.row.name):
        return None
    end = target.info(found.row.name).position
    starts = [target.info(rows[i].name).position for i in found.op.inputs if i in rows and target.has(rows[i].name)]
    start = max(starts, default=-1)
    inside = sorted((t for t in target.tensors if start < t.position < end and "@" not in t.name
                     and not reference.has(t.name) and t.kind != "input"), key=lambda t: t.position)
    for rec in inside:
        arr = np.asarray(target.array(rec.name), dtype=np.float64).reshape(-1)
        if arr.dtype.kind != "f" or not arr.size:
            continue
        mags = np.abs(arr[np.isfinite(arr)])
        top = float(mags.max()) if mags.size else 0.0
        bad = int(arr.size - mags.size)
        rail = next((r for r in RAILS if abs(top - r) <= (1.0 - AT_RAIL) * r), None)
        at = bad + (int(np.count_nonzero(np.abs(mags - rail) <= (1.0 - AT_RAIL) * rail)) if rail else 0)
        if at and (bad or top >= NEAR_RAIL * FP16_MAX):
            return InnerOverflow(tensor=rec.name, op=rec.op, op_type=rec.op_type, target_max=top, at_rail=at,
                                 size=int(arr.size))
    return None


def _downstream(tensor: str, consumers: Mapping[str, list[OpNode]], limit: int = 6) -> list[str]:
    """Op types reached from ``tensor`` breadth first (the construct the overflow sits in)."""
    out: list[str] = []
    frontier, seen = [tensor], {tensor}
    while frontier and len(out) < limit:
        nxt: list[str] = []
        for name in frontier:
            for op in consumers.get(name, []):
                if op.name not in seen:
                    seen.add(op.name)
                    out.append(op.op_type)
                    nxt.extend(op.outputs)
        frontier = nxt
    return out[:limit]


def _measure(found: Overflow, reference: Run, target: Run) -> None:
    assert found.row is not None
    t = np.asarray(target.array(found.row.name), dtype=np.float64).reshape(-1)
    found.size = int(t.size)
    finite = np.isfinite(t)
    found.nonfinite = int(t.size - np.count_nonzero(finite))
    mags = np.abs(t[finite])
    found.target_max = float(mags.max()) if mags.size else 0.0
    tm = found.target_max
    close = [r for r in RAILS if abs(tm - r) <= (1.0 - AT_RAIL) * r]
    found.rail = min(close, key=lambda r: abs(tm - r)) if close else None
    at = int(np.count_nonzero(np.abs(mags - found.rail) <= (1.0 - AT_RAIL) * found.rail)) if found.rail is not None else 0
    found.at_rail = at + found.nonfinite
    if reference.has(found.tensor):
        r = np.asarray(reference.array(found.tensor), dtype=np.float64)
        found.ref_beyond = int(np.count_nonzero(np.abs(r) > FP16_MAX))
