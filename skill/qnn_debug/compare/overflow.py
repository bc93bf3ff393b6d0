"""Where a comparison meets the fp16 range: the first op whose reference output leaves it, and what the
target holds there.

An op whose reference output exceeds 65504 while its inputs fit cannot be run by any fp16 engine: HTP
saturates at 131008 (no inf), an IEEE producer gives inf, the fp16 floor clips at 65504. Its local re-run
(fp32 on the target's inputs) then disagrees by a lot, which looks like a wrong op; it is not — the model
is not fp16-safe there. The finding names that op, the reference's magnitude, and how much of the target
sits at the rail, so the verdict can say ``precision`` / ``nan_inf`` with numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runstore import Run
from .localise import OpNode
from .ranges import FP16_MAX, HTP_FP16_MAX, first_overflows, max_abs
from .schema import TensorRow

NEAR_RAIL = 0.9  # a target whose largest magnitude reaches 90 % of 65504 sits at (or near) the fp16 rail
AT_RAIL = 0.999  # an element this close to the rail counts as saturated
POOR_SQNR_DB = 30.0  # near the rail but not saturated: only a finding when the value is also badly off
HEADROOM = 4.0  # rescale so that the largest value lands a factor 4 below 65504
SQUARING_OPS = {"ReduceSumSquare", "ReduceL2", "Pow"}  # outputs grow with the square of the input scale
CONSTANT_OPS = {"Constant", "ConstantOfShape"}
# Where fp16 producers stop: IEEE's largest finite value (and a clipping floor), 2**16 (measured: the simulator's
# MatMul tops out at 65536, code 0x7C00), and HTP's saturation code 0x7FFF.
RAILS = (FP16_MAX, 65536.0, HTP_FP16_MAX)


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

    @property
    def dumped(self) -> bool:
        return self.row is not None

    def rescale_exponent(self) -> int:
        """k such that scaling the op's input by 2**-k brings its output below 65504 / HEADROOM."""
        factor = self.ref_max * HEADROOM / FP16_MAX
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
                "rescale_input": self.source, "scale_invariant": scale_invariant(self.op.op_type, self.downstream or [])}


# Ops whose result does not change (up to eps) when their input is multiplied by a constant: the place to
# rescale by a power of two (exact in fp16) without touching the rest of the model.
_NORMALIZING = {"Sqrt", "Div", "Reciprocal", "LpNormalization", "ReduceL2"}


def scale_invariant(op_type: str, downstream: list[str]) -> str | None:
    """Name of the scale-invariant construct the overflow sits in, if recognisable."""
    seen = [op_type, *downstream]
    if "LayerNormalization" in seen:
        return "LayerNorm"
    if "Softmax" in seen[:3]:
        return "Softmax input"
    if any(t in _NORMALIZING for t in seen):
        return "RMSNorm" if "ReduceMean" in seen else "L2-norm"
    return None


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
                  target: Run, *, model_nodes: Mapping[str, Any] | None = None) -> Overflow | None:
    """The first op leaving the fp16 range whose target is at the rail (or, not dumped, broken downstream).

    HTP holds values up to 131008 (exponent-31 codes), so when the first op beyond 65504 is held correctly
    the search continues with 131008 as the limit."""
    for limit in (FP16_MAX, HTP_FP16_MAX):
        found = _find(ops, rows, maxima, reference, target, model_nodes, limit)
        if found is not None:
            return found
    return None


def _find(ops: list[OpNode], rows: Mapping[str, TensorRow], maxima: Mapping[str, float], reference: Run,
          target: Run, model_nodes: Mapping[str, Any] | None, limit: float) -> Overflow | None:
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
    unsafe = [n for n, m in maxima.items() if m > FP16_MAX]
    producer = {o: op for op in ops for o in op.outputs}
    for op, tensor in origins:
        source = next((i for i in op.inputs if i in maxima), op.inputs[0] if op.inputs else None)
        squaring = _squaring(op, model_nodes)
        before = producer.get(source) if source is not None else None
        if not squaring and before is not None and _squaring(before, model_nodes) and before.inputs:
            source, squaring = before.inputs[0], True  # a sum of squares: rescale what is squared
        found = Overflow(op=op, tensor=tensor, ref_max=maxima[tensor],
                         input_max=max((maxima.get(i, 0.0) for i in op.inputs), default=0.0),
                         row=rows.get(tensor), squaring=squaring,
                         later_unsafe=max(0, len(unsafe) - 1), downstream=_downstream(tensor, consumers),
                         source=source)
        if found.row is None:
            later = [r for r in rows.values() if r.position >= op.position and r.status == "bad"]
            if later:
                return found
            continue
        _measure(found, reference, target)
        poor = (found.row.metrics.get("sqnr_db") or 0.0) < POOR_SQNR_DB
        near = found.target_max is not None and found.target_max >= NEAR_RAIL * FP16_MAX
        if found.nonfinite or (near and (found.at_rail or poor)):
            return found
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
