"""What ``baseline`` returns and writes to ``baseline.json`` (pydantic only, so faces load it cheaply).

:mod:`qnn_debug.baseline` builds these and re-exports them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .compare.ranges import RangeReport
from .runstore_models import InputInfo, now_iso

BASELINE_SCHEMA = 1


GateStatus = Literal["passed", "failed", "skipped", "not_applicable"]


class GateOutput(BaseModel):
    """One final output in the gate: MNN-vs-ORT relative error against its limit."""

    name: str
    rel_error: float | None  # max|mnn - ort| / max|ort|; None when one side is not finite
    max_abs: float | None
    ref_max_abs: float  # max|ort|: a near-zero output makes any relative error meaningless
    floor_rel_error: float | None
    limit: float
    passed: bool
    # which rule set ``limit``: "fp32" (a tenth of the fp16 floor) or "fp16" (twice the model's own fp16 error)
    limit_rule: Literal["fp32", "fp16"] = "fp32"
    fp16_own_rel_error: float | None = None  # fp16 models: ORT's fp16 run vs the same graph lifted to fp32
    fp32_lift_rel_error: float | None = None  # fp16 models: MNN CPU vs that fp32 lift (MNN computes in fp32)


class GateReport(BaseModel):
    status: GateStatus
    max_rel_error: float | None = None  # worst over the final outputs
    worst_tensor: str | None = None  # worst over every tensor both runs share
    worst_tensor_rel_error: float | None = None
    # the first tensor in graph order whose MNN-vs-ORT error exceeds its limit (the outputs' rule): the cause
    first_divergent: str | None = None
    first_divergent_op: str | None = None  # "Gather embed_tokens": the model node that makes it
    first_divergent_rel_error: float | None = None  # None: not finite on one side
    first_divergent_limit: float | None = None
    # a passing gate names no divergent tensor: one beyond its limit while every output agrees is moved here, with why
    # it does not count (the .mnn holds another value under that ONNX name: a fused op's output, a rescaled stage)
    divergent_not_counted: str | None = None
    not_counted_why: str | None = None
    compared_tensors: int = 0
    outputs: list[GateOutput] = Field(default_factory=list)
    shape_mismatches: list[str] = Field(default_factory=list)
    note: str = ""
    arithmetic: Literal["fp32", "fp16"] = "fp32"  # what the graph computes in, read from it (float16 weights, casts)
    limit_why: str = ""  # which limit applied to the outputs and why


class MnnModelCheck(BaseModel):
    """The user's own ``.mnn`` (``--mnn-model``): its MNN CPU gate and how it differs from the one converted here."""

    path: str
    sha256: str
    run: str  # sub-directory of its MNN CPU run inside the baseline
    gate: GateReport
    same_as_converted: bool | None = None  # None: nothing was converted to compare with (--no-mnn-gate)
    differences: list[str] = Field(default_factory=list)
    ranges: RangeReport | None = None  # the fp16 range of this .mnn's own MNN CPU run (not the ONNX reference's)


class BaselineReport(BaseModel):
    """Contents of ``baseline.json``."""

    schema_version: int = BASELINE_SCHEMA
    model: str
    model_format: Literal["onnx", "mnn"]
    model_sha256: str
    reference: str  # "ort-cpu", "ort-cpu fake-quant" or "mnn-cpu"
    qdq_model: bool = False
    inputs: InputInfo
    trusted: bool
    sentence: str  # plain words: can the reference be trusted, and if not, why
    gate: GateReport
    floor: str  # "built" or why there is none
    ranges: RangeReport | None = None  # fp16 range of the reference: the tensors that are not fp16-safe
    mnn_model: MnnModelCheck | None = None  # the user's own .mnn, gated too (--mnn-model)
    created_at: str = Field(default_factory=now_iso)
    runs: dict[str, str] = Field(default_factory=dict)  # role → sub-directory


class BaselineResult(BaseModel):
    """What ``run_baseline`` returns (and ``qnn-debug baseline --json`` prints)."""

    out: str
    inputs_path: str
    report: BaselineReport
    tensors: dict[str, int]  # run directory → captured tensors
