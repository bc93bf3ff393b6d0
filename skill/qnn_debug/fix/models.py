"""What ``fix`` returns (pydantic only, so the registry and the faces load it for free)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..next_step import NextStep

FixKind = Literal["fp16_rescale", "fused_activation", "shape_mutable", "llm_export", "encoding", "region_rescale",
                  "none"]
# The verdict patterns of an fp16-range finding: `fp16_range` (saturation at 131008) and `nan_inf`, which results
# stored before that name existed carry; the evidence key `fp16_range` decides as well.
RANGE_PATTERNS = frozenset({"fp16_range", "nan_inf"})


class Numbers(BaseModel):
    """A verdict and its SQNR where it matters: at the first failing tensor and at every model output."""

    verdict: str
    pattern: str = "none"
    tensor: str | None = None  # the first failing tensor of the run before the fix
    tensor_sqnr_db: float | None = None
    outputs_sqnr_db: dict[str, float | None] = Field(default_factory=dict)
    report: str | None = None  # where the run's compare report is


class ProofCheck(BaseModel):
    """One thing the fix must hold to, measured."""

    name: str
    passed: bool
    detail: str


class RescaleSite(BaseModel):
    """One power-of-two rescale: where the fp16 range was left, what was scaled and why by that much."""

    overflow_op: str
    overflow_tensor: str
    source: str  # the tensor multiplied by 2**-exponent
    exponent: int
    place: str  # how the scale went in: folded into an op's weights, or a new Mul
    region: list[str] = Field(default_factory=list)  # ops that see the scaled values (up to the scale-invariant op)
    constants: list[str] = Field(default_factory=list)  # constants rescaled with it (eps, biases)
    bound_source: Literal["interval", "sample"]  # what sized the exponent
    sized_by: str | None = None  # the region's tensor whose bound set the exponent
    # ``sized_by``'s interval bound over the declared input range (before the fix): no input inside the range makes
    # it larger (kept under its first name, ``worst_case_max``, for readers of the JSON; ``interval_bound`` too)
    worst_case_max: float | None = None
    interval_bound: float | None = None
    corner_max: float | None = None  # ``sized_by`` on the corner input (every float input at its range's far end)
    corner: str | None = None  # that corner in words ("x = 255 everywhere")
    sample_max: float | None = None  # ``sized_by``'s largest value on the sample (before the fix)
    after_max: float | None = None  # ``sized_by``'s bound after the fix


class ShippedMnn(BaseModel):
    """The fixed ``.mnn`` written beside the user's (what they ship), how it was converted and gated."""

    path: str | None = None  # None: the gate failed, nothing was written
    beside: str | None = None  # the user's .mnn it sits beside (None: none known; it went beside the ONNX model)
    converter_flags: list[str] = Field(default_factory=list)
    origin: str = ""  # where the flags came from, in words
    not_from_file: str = ""  # the flags a .mnn does not record (defaults used)
    gate: str = ""
    gate_passed: bool = False


class FixResult(BaseModel):
    """The fix for a verdict, the artefact written and the proof, with numbers before and after."""

    kind: FixKind
    verdict: str  # the verdict that was fixed (kind, pattern)
    summary: str
    artefact: str | None = None  # the fixed file, written next to the user's (never overwriting)
    mnn: ShippedMnn | None = None  # the fixed .mnn beside the user's .mnn (onnx fixes)
    proven: bool = False
    proof: list[ProofCheck] = Field(default_factory=list)
    not_proven: list[str] = Field(default_factory=list)  # what this machine cannot prove, plainly
    left: list[str] = Field(default_factory=list)  # proven for what the fix was for, but still short (with numbers)
    before: Numbers | None = None
    after: Numbers | None = None
    sites: list[RescaleSite] = Field(default_factory=list)
    input_range: dict[str, list[float]] = Field(default_factory=dict)
    input_range_source: str | None = None  # "declared" or "sample" (min..max of the sample input)
    out: str | None = None  # proof runs
    commands: list[str] = Field(default_factory=list)  # llm_export: re-export / generate_llm_qnn.py lines, as run
    command_notes: list[str] = Field(default_factory=list)  # llm_export: where each value of those lines comes from
    findings_before: list[str] = Field(default_factory=list)  # llm_export: llm-check finding ids
    findings_after: list[str] = Field(default_factory=list)
    mnn_models: dict[str, str] = Field(default_factory=dict)  # fused_activation: the .mnn converted before/after
    case_file: str | None = None  # the cases file a solved case was appended to (only after the proof passed)
    next_steps: list[NextStep] = Field(default_factory=list)
