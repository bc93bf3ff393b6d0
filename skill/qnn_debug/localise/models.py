"""What bisection, block localisation and the dump fallback return (pydantic only, no numpy/onnx).

The faces load these schemas at start-up; :mod:`.probe`, :mod:`.bisect`, :mod:`.blocks` and
:mod:`.fallback` build them and re-export them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..compare.schema import TensorStatus
from ..next_step import NextStep


class ProbeTensor(BaseModel):
    """One frontier tensor of a probe."""

    name: str
    target_sqnr_db: float | None = None
    floor_sqnr_db: float | None = None
    excess_db: float | None = None  # dB short of the (capped) floor
    status: TensorStatus = "unknown"
    max_abs_ref: float | None = None
    opinions: dict[str, float | None] = Field(default_factory=dict)  # other backends' SQNR (e.g. OpenCL fp16)


class Probe(BaseModel):
    """The model cut after one op and run on the target."""

    index: int  # cut point index
    position: int  # the op's position in execution order
    op: str
    op_type: str
    frontier: int  # how many tensors the cut exposes
    bad: bool
    worst: ProbeTensor | None = None
    bad_tensors: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    round: int = 0  # the round it ran in (probes of one round run at once; 0: the first probe, or judged for free)


class FirstFailingOp(BaseModel):
    op: str
    op_type: str
    position: int
    tensor: str | None = None  # the op's output that turned the cut bad
    target_sqnr_db: float | None = None
    floor_sqnr_db: float | None = None
    excess_db: float | None = None
    last_good_op: str | None = None  # the op before it whose cut was still good (None: the graph inputs)


class RangeFinding(BaseModel):
    """The first tensor whose fp32 reference leaves the fp16 range."""

    tensor: str
    op: str | None
    op_type: str | None
    position: int
    max_abs_ref: float
    note: str


class BisectResult(BaseModel):
    method: Literal["bisect"] = "bisect"
    out: str
    model: str
    target: str
    baseline: str | None = None
    floor: str  # what served as the fp16 floor
    cut_points: int
    probes: list[Probe] = Field(default_factory=list)
    first_failing: FirstFailingOp | None = None
    verdict: Literal["real_bug", "precision", "ok"]
    summary: str
    fp16_range: RangeFinding | None = None
    elapsed_s: float = 0.0
    timings: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)  # e.g. ops lowered for the simulator as MNN's converter does
    next_steps: list[NextStep] = Field(default_factory=list)


class BlockCheck(BaseModel):
    first: int
    last: int
    inputs: list[str]
    outputs: list[str]
    bad: bool
    worst: ProbeTensor | None = None
    seconds: float = 0.0
    # ops outside the layers (rotary tables, deepstack adds, mergers) are judged as segments of their own:
    # ``label`` says where they sit ("outside the layers, before layer 0"); empty for a block of layers
    label: str = ""
    missing: list[str] = Field(default_factory=list)  # reference results here that the target graph never computes
    not_judged: str = ""  # why the target could not run this segment (ops outside the layers only)


class BlockFirstFailing(BaseModel):
    op: str | None
    op_type: str | None
    tensor: str
    position: int  # in the model (ops side by side) or in the block's own graph (inner diagnose/bisect)
    block: str
    evidence: ProbeTensor | None = None  # the op alone on reference inputs, against its fp16 floor
    method: str = "ops side by side on reference inputs"


class BlockResult(BaseModel):
    method: Literal["block"] = "block"
    out: str
    model: str
    # which graph was localised: "vision encoder" (a VL export's visual.onnx: patches in, /blocks.N/),
    # "decoder" (llm.onnx: /layers.N/), "decoder (M-RoPE)" (3-row position ids), or "layered model"
    graph: str = "decoder"
    blocks: list[BlockCheck] = Field(default_factory=list)
    first_failing_block: BlockCheck | None = None
    first_failing: BlockFirstFailing | None = None
    block_verdict: str | None = None  # the block diagnosis's verdict kind (real_bug, precision, ...)
    block_diagnosis: str | None = None  # its output directory
    block_pattern: str | None = None  # the block diagnosis's pattern (rotary_layout, zero_input, ...)
    block_finding: str | None = None  # the block diagnosis's verdict sentence
    verdict: Literal["real_bug", "precision", "ok"]
    summary: str
    fp16_range: RangeFinding | None = None
    elapsed_s: float = 0.0
    timings: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)  # e.g. ops lowered for the simulator as MNN's converter does
    next_steps: list[NextStep] = Field(default_factory=list)


Method = Literal["full_dump", "chunked_dump", "bisect"]


class FallbackReport(BaseModel):
    """Why the full dump was not used, what was tried instead, and which method gave the verdict."""

    method: Method
    full_dump_not_used: str
    attempts: list[str] = Field(default_factory=list)
    bisect: BisectResult | None = None

