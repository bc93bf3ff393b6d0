"""What ``compare-targets`` returns (pydantic only: the registry and the faces load it for free)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..next_step import NextStep


class TargetGapRow(BaseModel):
    """One reference tensor both targets have: each target's SQNR against the fp32 reference and the gap."""

    name: str  # the reference tensor
    op: str | None = None
    op_type: str | None = None
    position: int = -1
    sqnr_a_db: float | None = None
    sqnr_b_db: float | None = None
    gap_db: float | None = None  # sqnr_b - sqnr_a: > 0 where A is worse than B
    step_db: float | None = None  # how much the gap grew here over the largest gap seen before (execution order)
    status_a: str = "unknown"  # A's own status against the floor: a gap where A is at the floor's noise does not count
    target_a_name: str | None = None  # the tensor's name in each run (t<N> for an MNN dump)
    target_b_name: str | None = None


class TargetsComparison(BaseModel):
    """Two runs of one model on two targets, each against the same baseline, joined tensor by tensor: where the
    error of A (e.g. MNN's own QNN path on a host build) leaves that of B (e.g. ONNX Runtime's QNN EP on the same
    HTP simulator)."""

    baseline: str
    target_a: str
    target_b: str
    label_a: str
    label_b: str
    rows: list[TargetGapRow] = Field(default_factory=list)
    only_a: int = 0  # reference tensors only A's run aligned
    only_b: int = 0
    outputs: list[TargetGapRow] = Field(default_factory=list)
    # the first tensor where A, worse than the fp16 floor allows, falls GAP_DB behind B and the gap steps up
    first_gap: TargetGapRow | None = None
    largest_step: TargetGapRow | None = None
    gap_threshold_db: float
    step_threshold_db: float
    summary: str
    verdicts: dict[str, str] = Field(default_factory=dict)  # each run's own compare verdict, for context
    next_steps: list[NextStep] = Field(default_factory=list)
