"""The patterns stage: which wrong semantics reproduce the confirmed op (:mod:`.patterns`), and the numerics
patterns: an op whose reference leaves the fp16 range (:mod:`.overflow`, float targets) or a device encoding
that clips the data (:mod:`.quant_detect`, quantized targets)."""

from __future__ import annotations

from ..runstore import Run
from .localise import Located
from .overflow import find_overflow, reference_maxima
from .patterns import run_tests
from .quant_detect import find_range_clip
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
    return PatternFindings(overflow=find_overflow(located.ops, measured.rows,
                                                  reference_maxima(measured.all_rows, reference), reference, target,
                                                  model_nodes=model_nodes))
