"""What the compare stages hand each other: the metrics stage's :class:`Measured` (with its
:class:`InputMismatch` list), the local re-run stage's :class:`Rerun` (its :class:`Finding` per suspect and the
:class:`Confirmed` one) and the patterns stage's :class:`PatternFindings`.

Plain data in one module, so that a stage reads an earlier stage's output without importing that stage (no
import cycle, no import only for type checking). The localise stage's ``Located`` stays in :mod:`.localise`,
which imports no other stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .localise import OpNode, Suspect
from .overflow import Overflow
from .patterns import PatternContext, Trial
from .quant_detect import QuantDetection, RangeClip
from .rail import Harmless
from .schema import LocalError, TensorRow

__all__ = ["Confirmed", "Finding", "InputMismatch", "Measured", "PatternFindings", "Rerun"]


@dataclass
class InputMismatch:
    """A graph input whose first observation in the target (a backend copy) differs from the reference input."""

    name: str  # the reference's graph input
    observed_as: str  # the target tensor that holds it
    sqnr_db: float | None
    constant: float | None = None  # the copy's single value when every element is the same
    nonfinite: int = 0  # NaN/Inf elements in the copy
    size: int = 0


@dataclass
class Measured:
    """The metrics stage's output."""

    all_rows: list[TensorRow]  # every aligned pair, aliases included, in the target's execution order
    rows: dict[str, TensorRow]  # reference tensor -> its first observation (the row localisation uses)
    quantized: bool
    detection: QuantDetection
    zero_inputs: dict[str, list[str]] = field(default_factory=dict)  # graph input -> target tensors holding zeros
    input_mismatches: list[InputMismatch] = field(default_factory=list)
    uncompared: list[str] = field(default_factory=list)  # tensors the target holds that could not be judged
    warnings: list[str] = field(default_factory=list)  # inputs, disagreeing observations, uncompared, bad reference


@dataclass
class Finding:
    """A suspect after its local re-run (and, once confirmed wrong, the patterns stage's answer)."""

    suspect: Suspect
    local: LocalError | None
    best: Trial | None = None
    trials: list[Trial] = field(default_factory=list)
    reads_graph_input: bool = False
    pinned: OpNode | None = None  # an op inside the re-run segment that the matching pattern edited


@dataclass
class Confirmed:
    """The first suspect whose local re-run is wrong, with its re-run and target output for the pattern tests."""

    finding: Finding
    context: PatternContext | None  # None when the re-run's output cannot be laid over the target's


@dataclass
class Rerun:
    """The local re-run stage's output: every suspect checked (in order), and the confirmed one if any."""

    findings: list[Finding]
    confirmed: Confirmed | None = None


@dataclass
class PatternFindings:
    """The patterns stage's output besides the confirmed op's match (written into its finding): the numerics
    patterns, an op whose reference leaves the fp16 range (float targets) or an encoding that clips the data
    (quantized targets)."""

    overflow: Overflow | None = None
    range_clip: RangeClip | None = None
    rail: list[Harmless] = field(default_factory=list)  # tensors at the fp16 rail that nothing downstream feels
