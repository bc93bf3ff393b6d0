"""Values at the fp16 rail that nothing downstream feels: decided from the graph and the reference's numbers.

A tensor whose reference leaves ±65504 is a finding only where the difference reaches something that depends on
it. An additive attention mask of -65504 (fp16's lowest, what many exporters write for "minus infinity") makes
``scores + mask`` leave the range by a hair; an fp16 engine holds the rail there, and the Softmax after it is
exactly what it is on a healthy run (exp underflows to 0 either way). The same holds for values a following
Min/Max/Clip clamps, entries a Where or Gather drops, and a mask's fill value in the model's own inputs.

The test never reads node names. It clips the reference tensor to ±65504 (the strongest thing any fp16 engine
does to it: HTP keeps values up to 131008, IEEE gives inf, the floor clips at 65504), re-runs its consumers one
op at a time on the reference's other inputs, and follows the difference while it changes what an op computes.
Where every path ends in an op whose output is unchanged (to within half an fp16 step of its own magnitude), the
rail is harmless and those ops are named as what absorbs it; a difference that reaches a graph output, an op that
cannot be re-run, or a walk longer than its budget keeps the finding (the conservative answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .local_error import LocalRunError, ModelIndex, prepare
from .localise import OpNode
from .ranges import FP16_MAX
from .schema import TensorRow

HALF_STEP = 2.0 ** -11  # half an fp16 step relative to a tensor's largest magnitude: what fp16 cannot see
BASE_BUDGET = 8  # op re-runs allowed per walk, plus PER_CONSUMER for each direct reader of the railed tensor
PER_CONSUMER = 4

Values = Callable[[str], "np.ndarray | None"]  # reference values of a tensor (None: not captured)


@dataclass
class Harmless:
    """A tensor at the fp16 rail whose difference every path absorbs: the ops that absorb it, and how."""

    tensor: str
    ref_max: float
    absorbed_by: list[tuple[str, str]]  # (op name, op type) whose output the rail does not change
    carried_by: list[str] = field(default_factory=list)  # tensors that carry the rail on the way (changed, in range)
    absorbed_outputs: list[str] = field(default_factory=list)  # the absorbing ops' (unchanged) outputs
    op: str | None = None  # the op producing ``tensor`` (None: a graph input)
    op_type: str | None = None
    position: int = -1
    target_note: str | None = None  # the absorbing op's output on the target, where it was compared

    def reason(self) -> str:
        """One clause: what absorbs the rail ("the Softmax after it: exp underflows to 0 either way")."""
        kinds = sorted({t for _, t in self.absorbed_by})
        named = ", ".join(f"{n} ({t})" for n, t in self.absorbed_by[:3])
        more = f" and {len(self.absorbed_by) - 3} more" if len(self.absorbed_by) > 3 else ""
        how = {"Softmax": "its entries beyond the range are exp-underflow zeros either way",
               "Min": "the clamp cuts those values anyway", "Max": "the clamp cuts those values anyway",
               "Clip": "the clamp cuts those values anyway", "Where": "the Where drops those entries",
               "Gather": "the Gather never reads those entries"}
        why = "; ".join(how[k] for k in kinds if k in how) or "their outputs are unchanged"
        return (f"clipping it to ±{FP16_MAX:g} leaves {named}{more} unchanged ({why})"
                + (f"; {self.target_note}" if self.target_note else ""))

    def sentence(self) -> str:
        return f"at the rail, harmless: `{self.tensor}` reaches {self.ref_max:.3g}, but {self.reason()}"

    def evidence(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "op": self.op, "op_type": self.op_type, "position": self.position,
                "reference_max_abs": float(f"{self.ref_max:.6g}"),
                "absorbed_by": [{"op": n, "op_type": t} for n, t in self.absorbed_by],
                "carried_by": self.carried_by[:8], "note": self.sentence()}


def consumers_of(ops: Sequence[OpNode]) -> dict[str, list[OpNode]]:
    out: dict[str, list[OpNode]] = {}
    for op in ops:
        for name in dict.fromkeys(op.inputs):
            out.setdefault(name, []).append(op)
    return out


def _same(new: np.ndarray, old: np.ndarray) -> bool:
    """Equal to within half an fp16 step of the tensor's own magnitude, non-finite entries where they were."""
    if new.shape != old.shape:
        return False
    a, b = np.asarray(new, np.float64), np.asarray(old, np.float64)
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(np.nan_to_num(a[~fa]), np.nan_to_num(b[~fb])):
        return False
    if not fb.any():
        return True
    top = float(np.abs(b[fb]).max())
    return bool(np.abs(a[fa] - b[fb]).max() <= HALF_STEP * top + 1e-30)


def _clipped(values: np.ndarray) -> np.ndarray:
    out = np.clip(np.asarray(values, np.float32), -FP16_MAX, FP16_MAX)  # -inf/inf included; NaN stays NaN
    return out.astype(values.dtype, copy=False)


def find_harmless(tensor: str, ref_max: float, index: ModelIndex, consumers: Mapping[str, list[OpNode]],
                  values: Values, outputs: set[str]) -> Harmless | None:
    """The ops that absorb ``tensor`` clipped to the fp16 range, when every path does; None when the difference
    reaches a graph output or something the walk cannot decide."""
    start = values(tensor)
    if start is None or start.dtype.kind != "f":
        return None
    changed: dict[str, np.ndarray] = {tensor: _clipped(start)}
    frontier = [tensor]
    done: set[str] = set()
    absorbed: list[tuple[str, str]] = []
    carried: list[str] = []
    absorbed_outputs: list[str] = []
    budget = BASE_BUDGET + PER_CONSUMER * len(consumers.get(tensor, []))

    def fetch(name: str) -> tuple[np.ndarray, str] | None:
        if name in changed:
            return changed[name], "clipped"
        got = values(name)
        return (np.asarray(got), "reference") if got is not None else None

    while frontier:
        name = frontier.pop(0)
        if name in outputs:
            return None  # the application reads the difference
        for op in sorted(consumers.get(name, []), key=lambda o: o.position):
            if op.name in done:
                continue
            done.add(op.name)
            budget -= 1
            if budget < 0:
                return None
            try:
                run = prepare(index, [op.name], fetch)
            except LocalRunError:
                return None
            moved = False
            for out, new in run.outputs.items():
                if new.dtype.kind != "f":
                    if not _equal_exact(new, values(out)):
                        return None  # an index or a mask changed: too far from "harmless" to follow
                    continue
                old = values(out)
                if old is None:
                    return None
                if not _same(new, np.asarray(old)):
                    changed[out], moved = new, True
                    frontier.append(out)
                    carried.append(out)
            if not moved:
                absorbed.append((op.name, op.op_type))
                absorbed_outputs.extend(op.outputs[:1])
    if not absorbed:
        return None
    return Harmless(tensor=tensor, ref_max=ref_max, absorbed_by=absorbed, carried_by=carried,
                    absorbed_outputs=absorbed_outputs)


def _equal_exact(new: np.ndarray, old: np.ndarray | None) -> bool:
    return old is not None and new.shape == np.shape(old) and bool(np.array_equal(new, old))


class RailJudge:
    """Decides, once per tensor, whether a range finding there matters downstream; keeps what it found harmless."""

    def __init__(self, index: ModelIndex | None, ops: Sequence[OpNode], values: Values, outputs: set[str]):
        self.index, self.values, self.outputs = index, values, outputs
        self.consumers = consumers_of(ops)
        self.producer = {o: op for op in ops for o in op.outputs}
        self.found: dict[str, Harmless | None] = {}

    def harmless(self, tensor: str, ref_max: float) -> Harmless | None:
        if self.index is None:
            return None
        if tensor not in self.found:
            h = find_harmless(tensor, ref_max, self.index, self.consumers, self.values, self.outputs)
            if h is not None:
                op = self.producer.get(tensor)
                if op is not None:
                    h.op, h.op_type, h.position = op.name, op.op_type, op.position
            self.found[tensor] = h
        return self.found[tensor]

    def notes(self) -> list[Harmless]:
        return [h for h in self.found.values() if h is not None]


def mark_rows(rows: Iterable[TensorRow], notes: Sequence[Harmless]) -> None:
    """The tensor table says why a rail tensor is not the answer: its row, and the rows carrying its rail."""
    said = {h.tensor: h.sentence() for h in notes}
    for h in notes:
        for t in h.carried_by:
            said.setdefault(t, f"carries the rail of `{h.tensor}`, harmless: {h.reason()}")
    for row in rows:
        text = said.get(row.stands_for or row.name)
        if text is not None:
            row.note = text


def baseline_judge(run: Any) -> Callable[[str, float], str | None] | None:
    """For a baseline's range report: the rail judge over the reference's ONNX graph (weights left in their files;
    an op that needs them cannot be re-run, which keeps its finding), or None without an ONNX model."""
    from pathlib import Path

    from ..errors import BadInputError
    from ..onnx_graph import initializer_names, load_onnx, nodes_in_order

    info = run.record.model
    if info is None or info.format != "onnx" or not Path(info.path).is_file():
        return None
    try:
        index = ModelIndex.build(load_onnx(info.path, load_external_data=False))
    except BadInputError:
        return None
    inits = initializer_names(index.model)
    ops = [OpNode(n.position, n.name, n.op_type, tuple(i for i in n.inputs if i and i not in inits), n.outputs)
           for n in nodes_in_order(index.model)]

    def values(name: str) -> np.ndarray | None:
        return np.asarray(run.array(name, mmap=False)) if run.has(name) else None

    judge = RailJudge(index, ops, values, set(run.record.outputs))

    def words(tensor: str, top: float) -> str | None:
        h = judge.harmless(tensor, top)
        return h.sentence() if h is not None else None

    return words
