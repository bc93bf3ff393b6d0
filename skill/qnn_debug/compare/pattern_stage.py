"""The patterns stage: which wrong semantics reproduce the confirmed op (:mod:`.patterns`), and the numerics
patterns: an op whose reference leaves the fp16 range (:mod:`.overflow`, float targets) or a device encoding
that clips the data (:mod:`.quant_detect`, quantized targets)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..runstore import Run
from . import patterns_missing as _patterns_missing  # noqa: F401  (registers missing_op)
from .localise import Located
from .overflow import find_overflow, reference_maxima
from .patterns import run_tests
from .quant_detect import find_range_clip
from .rail import Harmless, RailJudge
from .ranges import FP16_MAX
from .schema import TensorRow
from .stage_types import Measured, PatternFindings, Rerun

__all__ = ["PatternFindings", "find_patterns"]


def find_patterns(rerun: Rerun, measured: Measured, located: Located, reference: Run, target: Run, *,
                  semantics: bool = True) -> PatternFindings:
    """Which wrong semantics reproduce the confirmed op (``semantics``), and the numerics patterns."""
    confirmed = rerun.confirmed
    if semantics and confirmed is not None and confirmed.context is not None:
        finding = confirmed.finding
        finding.best, finding.trials = run_tests(confirmed.context)
        node = finding.best.details.get("node") if finding.best is not None else None
        finding.pinned = next((op for op in finding.suspect.segment if op.name == node), None)
    if measured.quantized:
        return PatternFindings(range_clip=find_range_clip(measured.rows, reference, target,
                                                          measured.detection.model_encodings))
    model_nodes = located.index.nodes if located.index is not None else None
    maxima = reference_maxima(measured.all_rows, reference)
    rail = rail_judge(located, reference)
    overflow = find_overflow(located.ops, measured.rows, maxima, reference, target, model_nodes=model_nodes, rail=rail)
    produced = {o for op in located.ops for o in op.outputs}
    for name, top in maxima.items():  # a mask's fill value in the model's inputs: judged the same way
        if top > FP16_MAX and name not in produced and reference.has(name):
            rail.harmless(name, top)
    notes = rail.notes()
    for h in notes:
        h.target_note = _target_words(h, measured.rows)
    return PatternFindings(overflow=overflow, rail=notes)


def rail_judge(located: Located, reference: Run) -> RailJudge:
    """The judge of rail values for this comparison: the reference's values, its graph and its outputs."""

    def values(name: str) -> np.ndarray | None:
        return np.asarray(reference.array(name, mmap=False)) if reference.has(name) else None

    return RailJudge(located.index, located.ops, values, set(reference.record.outputs))


def _target_words(h: Harmless, rows: Mapping[str, TensorRow]) -> str | None:
    """How the absorbing ops came out on the target: the numbers that confirm the rail did not matter."""
    outs = [(op, rows[t]) for (op, _), t in zip(h.absorbed_by, h.absorbed_outputs, strict=False) if t in rows]
    if not outs:
        return None
    op, row = outs[0]
    if row.excess_db is None:
        return None
    if (row.excess_db or 0.0) < 1.0:
        return f"on the target {op} is at its floor (excess {row.excess_db:.1f} dB)"
    return (f"on the target {op} is {row.excess_db:.1f} dB beyond its floor, which the rail cannot cause: that "
            f"difference comes from its other inputs")
