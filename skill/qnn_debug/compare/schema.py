"""What a comparison returns. Other tools read this JSON: keep the field names stable.

The names ``first_failing``, ``verdict`` (``kind``/``pattern``/``confidence``/``summary``/``evidence``),
``tensors`` (``name, op, op_type, position, metrics, floor_metrics``), ``observer_effect_db`` and
``unaligned`` are the public contract of ``qnn-debug compare --json``. Add fields; never rename them.
Added: ``tensors[].stands_for/equivalence/label`` (alias rows), ``first_failing.observed_as``, ``counts.aliases``,
``reference_trusted``/``reference_note``.
``next_steps`` (added) is derived from the rest of the result when the comparison finishes: structured steps
(``tool``, ``cli``, ``why``), the same :class:`~qnn_debug.next_step.NextStep` triage and the localisers return.
Only pydantic (and the pydantic-only ``next_step``) is imported here, so the CLI and the MCP server can load
the schema for free.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..next_step import NextStep

SCHEMA_VERSION = 1

# undecided: a tensor is off, but neither an fp16 floor nor a re-run of the op says whether fp16 or the op is to blame
VerdictKind = Literal["ok", "precision", "quantization", "real_bug", "input_not_copied", "undecided"]
Pattern = Literal[
    "none", "zero_input", "bias_only", "permutation", "wrong_coordinates", "wrong_semantics",
    "scale_shift", "constant", "nan_inf", "encoding_range", "fp16_range",
    "rotary_layout", "missing_op", "fused_activation_dropped",
]
# ``fused_activation_dropped``: the target's output is the pre-activation value of an activation the model has (MNN
# fuses Conv/Deconvolution/BinaryOp + Relu into one op, and its QNN backend can lose the Relu); ``fix`` handles it.
# ``fp16_range``: a value beyond fp16's range (HTP saturates it at ±131008, an IEEE producer makes it inf); stored
# results from before it was named carry ``nan_inf`` for that case. ``nan_inf`` is a target holding NaN/inf
# where its own op went wrong (a real_bug pattern).
# ok: at the floor's noise level; degraded: worse than the floor but no jump; bad: a jump beyond the
# floor; unknown: not comparable (reference not finite, or nothing to compare against).
TensorStatus = Literal["ok", "degraded", "bad", "unknown"]
MetricValues = dict[str, float | None]


class LocalError(BaseModel):
    """The suspect op re-run on CPU with the TARGET's own inputs, compared with the target's output.

    ``inputs`` says where each boundary tensor came from: "reference" when the target had no usable copy, and
    then the local error also carries the error inherited from upstream (texts say so, see ``fmt.local_inputs``).

    Small local error means the op did its job on what it was given (the damage came from upstream or is
    precision); large local error means the op itself computed something else.
    """

    sqnr_db: float | None = None
    rel_l2: float | None = None
    max_abs: float | None = None
    diff_rate: float | None = None
    expected_sqnr_db: float | None = None  # the same op in the fp16 floor on the same inputs
    max_err_lsb: float | None = None  # quantized outputs: worst error in quantization steps
    ok: bool | None = None  # None when the op could not be re-run
    segment: list[str] = Field(default_factory=list)  # ops re-run (several when tensors were not dumped)
    inputs: dict[str, str] = Field(default_factory=dict)  # boundary tensor -> "target" | "reference"
    note: str | None = None


class FusedOp(BaseModel):
    """The target's op when it fused several model nodes (MNN Deconvolution + bias + BN + ReLU, a QNN EP fusion)."""

    op: str | None  # the target's op name (e.g. MNN's op name)
    op_type: str  # the target's op type (e.g. Deconvolution)
    target_tensor: str | None = None  # the target's name of the output (e.g. t2)
    model_nodes: list[str] = Field(default_factory=list)  # "name (OpType)" of the model nodes it covers


class FirstFailing(BaseModel):
    tensor: str  # a reference tensor name
    op: str | None  # the op that ran: the target's own when it fused model nodes (see ``fused``)
    op_type: str | None
    position: int
    local_error: LocalError | None = None
    observed_as: str | None = None  # the target tensor that stands for ``tensor`` (an alias row), if not itself
    fused: FusedOp | None = None  # set when the target's op covers several model nodes
    model_op: str | None = None  # with ``fused``: the model node producing ``tensor``
    model_op_type: str | None = None
    # The target's own tensor where it first fails when the reference has no such tensor: a stage of the target's
    # lowering of the model op (MNN runs ReduceSumSquare as a square, e.g. ``BinaryOp3``, and a sum); ``op`` is then
    # the target's op and ``model_op`` the model node it came from.
    target_tensor: str | None = None
    probe: list[str] = Field(default_factory=list)  # `op OP_TYPE --probe` arguments: its real shapes and attributes
    dump_tensor: str | None = None  # an MNN dump's own name of the failing tensor (t<N>: the .mnn's tensor index)
    dump_file: str | None = None  # the dump file holding it (execution_…_tensor_…_t<N>.raw)


class Verdict(BaseModel):
    kind: VerdictKind
    pattern: Pattern = "none"
    confidence: float
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class TensorRow(BaseModel):
    """One aligned tensor: target vs reference (``metrics``) and floor vs reference (``floor_metrics``).

    An **alias row** is a target tensor the reference does not have that stands for a reference tensor
    (a backend cast stage, a layout copy, a pre-activation stage): ``name`` is the target's name,
    ``stands_for`` the reference tensor it is compared with, ``label`` reads ``x@cast ≡ x``. Op, op type and
    position are the reference tensor's, so its rows sit where that tensor sits in execution order.
    """

    name: str
    op: str | None = None
    op_type: str | None = None
    position: int = -1
    metrics: MetricValues
    floor_metrics: MetricValues | None = None
    status: TensorStatus = "unknown"
    excess_db: float | None = None  # how much worse than the (capped) floor, in dB
    jump_db: float | None = None  # excess of this tensor minus the worst excess among its op's inputs
    layout: str | None = None  # how the target tensor was brought to the reference layout
    target_name: str | None = None
    quantized: bool = False
    stands_for: str | None = None  # alias rows: the reference tensor compared against
    equivalence: str | None = None  # alias rows: why the target tensor holds that tensor's values
    label: str | None = None  # alias rows: "<target name> ≡ <reference name>"
    note: str | None = None  # e.g. "at the rail, harmless: ..." (a range finding nothing downstream feels)


class UnalignedRow(BaseModel):
    """A tensor that could not be paired: listed, never silently dropped."""

    name: str
    side: Literal["reference", "target"]  # which run has it
    reason: str
    reference_shape: list[int] | None = None
    target_shape: list[int] | None = None
    op: str | None = None
    position: int | None = None


class CompareResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    reference: str
    target: str
    target_kind: str  # "run" | "mnn-dump" | "npz"
    floor: str | None = None
    model: str | None = None
    mnn_model: str | None = Field(default=None, description="the target's .mnn that was read (given or found), if any")
    precision: str | None = None  # of the target run
    first_failing: FirstFailing | None = None
    # False: the baseline's MNN CPU gate did not confirm the reference (failed or not run), said first in the
    # summary; None: the reference is a run outside any baseline. ``reference_note``: the baseline's sentence.
    reference_trusted: bool | None = None
    reference_note: str | None = None
    verdict: Verdict
    tensors: list[TensorRow] = Field(default_factory=list)
    observer_effect_db: dict[str, float] | None = None
    unaligned: list[UnalignedRow] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    # why the unaligned tensors were left out, counted by reason class (compare.unaligned.reason_class)
    unaligned_by_reason: dict[str, int] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    thresholds: dict[str, Any] = Field(default_factory=dict)
    report_files: dict[str, str] = Field(default_factory=dict)
    elapsed_s: float | None = None

    # What to run next for this verdict (MCP tool, runnable CLI line, why with the numbers and playbooks):
    # derived from the rest of the result by ``compare.rules.next_steps`` once the result is final.
    next_steps: list[NextStep] = Field(default_factory=list)
