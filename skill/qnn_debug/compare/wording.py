"""The wording stage: a :class:`~.verdict.Decision` and the findings it rests on become the verdict's summary
sentence, and a finished result becomes its next steps.

Every sentence of a comparison is built here, from numbers the earlier stages measured; nothing here decides.
Each verdict rule (:mod:`.rules`) uses one sentence function and one next-steps function from here.
The summary states the verdict with its numbers (SQNR against the reference and the floor, local error,
ranges, encodings) and what they mean.

Next steps are structured (:class:`~qnn_debug.next_step.NextStep`: MCP tool, runnable ``qnn-debug`` line,
why) and derived from the comparison alone — its paths, verdict, op types and observer effect — so the CLI,
the MCP tools, the report and the engine API all show the same ones (``CompareResult.next_steps``). Every
step carries a command: advice that has none of its own (edit the model, re-calibrate) rides on the
command that carries it out or checks it, and a value only the user knows is a quoted variable its ``why``
explains. A verdict without a next step leaves the user stuck exactly when the answer is "precision, no
single op" (PP-OCR rec on the simulator: ~18 dB below the floor, no op to blame).

Why these steps (measured on the HTP simulator): marking every tensor blocks ORT's graph fusions, and
fusions change HTP numerics as a whole-graph effect — PP-OCR rec's output went from 30.8 dB (unmarked)
to 46.3 dB with ``ConvBNFusion`` off, MiniLM's from 37.8 dB to 48.3 dB with ``MatMulAddFusion`` off. So
a precision verdict is followed by a re-dump with the fusion off and by the unmarked outputs, which
every htp-sim run keeps in ``unmarked_outputs.npz``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..mnn.soc import DEFAULT_SOC
from ..next_step import Arg, NextStep, Var, step
from ..runstore import INPUTS_FILE, REFERENCE_DIR
from . import fmt
from .local_error import local_limit_db
from .patterns import Trial
from .schema import FirstFailing, TensorRow, Verdict
from .thresholds import Thresholds
from .verdict import (
    Decision,
    Findings,
    checked,
    claims_absence,
    floor_fails,
    poor_floor_outputs,
    ref_name,
    top1_misses,
    unresolved,
)

if TYPE_CHECKING:
    from ..targets.base import Target
    from .schema import CompareResult


# --- the summary sentence ----------------------------------------------------------------------------------

def verdict(d: Decision, found: Findings, th: Thresholds, sentence: str) -> Verdict:
    """The public verdict: the decision's kind, pattern, confidence and evidence, with its summary (``sentence``:
    what the rule that decided says, see :mod:`.rules`)."""
    return Verdict(kind=d.kind, pattern=d.pattern, confidence=d.confidence,
                   summary=summary(d, found, th, sentence), evidence=d.evidence)


def summary(d: Decision, found: Findings, th: Thresholds, sentence: str) -> str:
    """The verdict in one paragraph: the rule's sentence, then the drift, unseen tensors and fused op notes."""
    text = sentence
    if "drift" in d.evidence and d.kind in ("ok", "precision"):
        text += drift_words(d.evidence["drift"])
    if found.uncompared and claims_absence(d):
        text = text.replace("every tensor", "every compared tensor")
        text += (f" {len(found.uncompared)} tensor(s) the target holds could not be compared: "
                 + "; ".join(found.uncompared[:3]) + ".")
    if d.first is not None and d.first.fused is not None:
        text += fused_words(d.first)
    return text


def drift_words(d: dict[str, Any]) -> str:
    """The drift note (evidence ``drift``): where the error drifts below the floor without one op jumping."""
    a, b = d["from"], d["to"]
    return (f" Precision note: the error drifts {d['drift_db']} dB further below the floor between positions "
            f"{a['position']} ({a['op'] or a['tensor']}) and {b['position']} ({b['op'] or b['tensor']}) without one op "
            f"jumping — accumulated fp16 rounding over that stretch, not a wrong op.")


def fused_words(first: FirstFailing) -> str:
    """One sentence for the verdict: which target op ran and what it fused."""
    f = first.fused
    if f is None:
        return ""
    where = f", {f.target_tensor}" if f.target_tensor else ""
    covers = ", ".join(f.model_nodes) if f.model_nodes else "the model's nodes"
    return (f" The target ran this as one op, {f.op} ({f.op_type}{where}), fusing the model nodes {covers}; "
            f"look up {f.op_type}.")


def _floor(found: Findings, th: Thresholds) -> str:
    return "the fp16 floor" if found.has_floor else f"a fixed fp16 level of {th.floor_cap_db:g} dB (no floor run)"


def _op_words(row: TensorRow) -> str:
    return f"{row.op or row.name} ({row.op_type or '?'}, position {row.position})"


def _below(row: TensorRow, found: Findings, th: Thresholds) -> str:
    """'20.4 dB below the 60 dB fp16 level (the floor is exact; …)': the excess and what it is measured from."""
    return fmt.shortfall(row.excess_db, (row.floor_metrics or {}).get("sqnr_db"), th.floor_cap_db,
                         has_floor=found.has_floor, quantized=found.quantized, sqnr=row.metrics.get("sqnr_db"))


def _quant_worst(row: TensorRow, found: Findings, th: Thresholds) -> str:
    """The worst quantized tensor in words: what the fp16 floor means there, and that the step is the yardstick."""
    floor = (row.floor_metrics or {}).get("sqnr_db")
    head = f"the worst tensor {row.name!r} has SQNR {fmt.db_unit(row.metrics.get('sqnr_db'))} against the reference"
    if found.has_floor and floor is not None and floor >= th.floor_cap_db:
        return (f"{head}, {fmt.amount(row.excess_db)} dB short of the {th.floor_cap_db:g} dB fp16 level; no fp16 floor "
                f"applies there (fp16 rounding leaves its quantized values unchanged: the floor is "
                f"{fmt.db_unit(floor)}), so the quantization step is the yardstick")
    return f"{head}, {_below(row, found, th)}, which is what quantization costs; the quantization step is the yardstick"


def zero_input_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    name = found.zero_inputs[0]
    consumer = found.input_consumers.get(name)
    reads = f"; {consumer.name} ({consumer.op_type}) is the first op to read it" if consumer else ""
    return (f"The model input {name!r} never reached the target: its copy there is all zeros{reads} (MNN online "
            f"QNN needs shapeMutable=false).")


def input_mismatch_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    m = found.input_mismatches[0]
    consumer = found.input_consumers.get(m.name)
    if m.nonfinite:
        how = f"holds NaN/Inf ({m.nonfinite} of {m.size} values)"
    elif m.constant is not None:
        how = f"is constant (every value {m.constant:.6g}) while the reference input is not"
    else:
        how = f"differs from the reference input (SQNR {fmt.db_unit(m.sqnr_db)})"
    reads = f" {consumer.name} ({consumer.op_type}) is the first op to read it." if consumer else ""
    return (f"The target's copy of input {m.name!r} ({m.observed_as}) {how}: either the baseline was built "
            f"from other data — rebuild it with `qnn-debug baseline \"$MODEL\" --inputs \"$INPUTS\"` "
            f"(MODEL: the model; INPUTS: the test dir or .npz the device used) — or the input was not copied into "
            f"the QNN graph (shapeMutable=true, Tensor usage is 1.). The error starts before any op, so no "
            f"downstream op is blamed.{reads}")


def encoding_range_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    c = found.range_clip
    assert c is not None
    row = c.row
    enc = (f"scale {c.scale:.4g}, offset {c.offset}" if c.scale is not None else
           f"step {c.step:.4g}, inferred from the target's values")
    calibrated = (f"; the model's calibrated range is [{c.model_range[0]:.4g}, {c.model_range[1]:.4g}]"
                  if c.model_range is not None else "")
    return (f"Quantization, not a wrong op: the device encoding of {ref_name(row)!r} ({_op_words(row)}) clips the "
            f"data. Its range is [{c.lo:.4g}, {c.hi:.4g}] ({enc}){calibrated}, while the reference spans "
            f"[{c.ref_min:.4g}, {c.ref_max:.4g}]: {100 * c.outside_share:.1f}% of the reference lies outside, "
            f"{100 * c.at_rail_share:.1f}% of the target sits at the rail, and the reference clipped at that range "
            f"reproduces the target at {fmt.db_unit(c.clip_sqnr_db)} (the target against the reference: "
            f"{fmt.db_unit(c.raw_sqnr_db)}; elements inside the range: {fmt.db_unit(c.in_range_sqnr_db)}).")


def fp16_range_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    o = found.overflow
    assert o is not None
    where = f"{o.op.name} ({o.op.op_type}, position {o.op.position})"
    if o.row is None:
        target = ("its output was not dumped, and the tensors after it are broken; an fp16 engine cannot hold "
                  "that value")
    elif o.nonfinite:
        target = f"the target holds inf/NaN there ({o.nonfinite} of {o.size} values): an IEEE fp16 producer overflowed"
    elif o.rail is not None and o.rail > 65536.0:
        target = (f"the target tops out at {o.target_max:.6g}, {o.at_rail} of {o.size} values at HTP's ±131008 "
                  f"saturation rail (HTP fp16 has no inf)")
    elif o.rail is not None and o.rail > 65504.0:
        target = (f"the target tops out at {o.target_max:.6g}, {o.at_rail} of {o.size} values at ±65536 (2^16, where "
                  f"the HTP op stops; HTP fp16 has no inf)")
    elif o.rail is None:
        target = (f"the target tops out at {o.target_max:.6g} and is badly off there "
                  f"(SQNR {fmt.db_unit(o.row.metrics.get('sqnr_db'))})")
    else:
        target = f"the target tops out at {o.target_max:.6g}, {o.at_rail} of {o.size} values at the ±65504 fp16 rail"
    inside = " (beyond 65504, but within what HTP holds: 131008)" if o.input_max > 65504.0 else ""
    if o.inner is not None:
        i = o.inner
        where = (f"`{i.tensor}` ({i.op_type or '?'} {i.op or i.tensor}, the target's own stage of {o.op.name} "
                 f"({o.op.op_type}, position {o.op.position}); the reference has no such tensor) is where the run "
                 f"first leaves the fp16 range: it tops out at {i.target_max:.6g}, {i.at_rail} of {i.size} values "
                 f"at the rail, before {o.op.name}'s own output. {where}")
    failing = floor_fails(d)
    floor_words = (f" The fp16 floor fails the same way (worst output {fmt.db_unit(failing)}): no fp16 engine can "
                   f"run this as is." if failing is not None else " No fp16 engine can run this as is.")
    return (f"Precision, not a wrong op: the model is not fp16-safe. {where} is the first op whose reference "
            f"output leaves the fp16 range: `{o.tensor}` reaches {o.ref_max:.3g} (fp16 max 65504) while its "
            f"inputs stay within ±{o.input_max:.3g}{inside}; {target}.{floor_words} Rescale by a power of two "
            f"around it: this sample alone needs 2^-{o.rescale_exponent()}, other inputs of your range can need more, "
            f"so size it over the declared input range (`qnn-debug fix` does, see next steps).")


def unconfirmed_bug_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    assert d.hit is not None
    s0 = d.hit.suspect
    first = found.rows[s0.tensor]
    why = found.local_unavailable or (d.hit.local.note if d.hit.local else None) or "no re-run"
    return (f"{_op_words(first)} is the first op whose output departs from the reference "
            f"({fmt.amount(s0.jump_db)} dB jump beyond {_floor(found, th)}); it could not be re-run to confirm ({why}).")


def quantization_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    done = checked(found)
    if done:
        sq = [f.local.sqnr_db for f in done if f.local and f.local.sqnr_db is not None]
        lsb = [f.local.max_err_lsb for f in done if f.local and f.local.max_err_lsb is not None]
        clause = (f"the {len(done)} op(s) where the error jumps reproduce the target on their own inputs "
                  f"within quantization noise (local SQNR ≥ {fmt.db_unit(min(sq)) if sq else fmt.NONE}"
                  f"{f', worst {fmt.amount(max(lsb))} of the {th.quant_lsb_ok:g} quantization steps allowed' if lsb else ''})")
    else:
        clause = "no op's error jumps beyond what its inputs already carry"
    worst_txt = _quant_worst(d.worst, found, th) if d.worst else "no tensor could be judged"
    return f"Quantization error, not a bug: {worst_txt}; {clause}."


def precision_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    worst, open_ = d.worst, unresolved(found)
    where = (f"the worst tensor {worst.name!r} has SQNR {fmt.db_unit(worst.metrics.get('sqnr_db'))}, "
             f"{_below(worst, found, th)}" if worst else f"the target is worse than {_floor(found, th)}")
    why = ("no op shows a jump beyond the floor" if not found.findings else
           "every suspect op reproduces the target on its own inputs" if not open_ else
           f"{len(open_)} suspect op(s) could not be re-run to tell (see evidence)")
    misses = top1_misses(found)
    top = ("; the target's top-1 differs from the reference's at " + ", ".join(
        f"{t.positions - t.agree} of {t.positions} positions of {n!r}" for n, t in list(misses.items())[:3])
        if misses else "")
    return f"Precision, not a wrong op: {where}, but {why}{top}."


def undecided_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    if d.hit is not None:
        row = found.rows[d.hit.suspect.tensor]
        where = (f"{_op_words(row)} is the first op whose output departs from the reference (SQNR "
                 f"{fmt.db_unit(row.metrics.get('sqnr_db'))}, {_below(row, found, th)})")
    elif d.worst is not None:
        where = (f"the worst tensor {d.worst.name!r} has SQNR {fmt.db_unit(d.worst.metrics.get('sqnr_db'))}, "
                 f"{_below(d.worst, found, th)}")
    else:
        where = f"the target is worse than {_floor(found, th)}"
    rerun = found.local_unavailable or (d.hit.local.note if d.hit and d.hit.local and d.hit.local.note else None)
    return (f"Undecided: {where}, but nothing measured here tells fp16 precision from a wrong op. Missing: an fp16 "
            f"floor (the model run with every tensor rounded through fp16, which a baseline built from the ONNX "
            f"model has) and a re-run of the op on the target's own inputs"
            f"{f' ({rerun})' if rerun else ' (compare needs the ONNX model for it)'}.")


def poor_floor_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    words = ", ".join(f"{n!r} {fmt.db_unit(db)}" for n, db in poor_floor_outputs(found, th)[:3])
    return (f"Precision: the target is at the fp16 floor, but the floor itself is not acceptable (graph output SQNR "
            f"{words}, below {th.output_ok_db:g} dB): no fp16 engine can run this as is.")


def ok_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    worst = d.worst
    if worst is not None and (worst.excess_db or 0.0) >= th.excess_ok_db:
        return (f"Healthy: {_outputs_words(d, th)}; no op's error jumps beyond its inputs'. The worst tensor "
                f"{worst.name!r} is {fmt.amount(worst.excess_db)} dB below {_floor(found, th)} (under the "
                f"{th.jump_db:g} dB that would fail it): fp16 rounding accumulated along the graph, which the "
                f"outputs absorb.")
    if worst is not None and (worst.excess_db or 0.0) >= 0.05:
        return (f"Healthy: every tensor is within {th.excess_ok_db:g} dB of {_floor(found, th)} "
                f"(worst {worst.name!r}, {fmt.amount(worst.excess_db)} dB).")
    return f"Healthy: every tensor is at the error level of {_floor(found, th)}."


def _outputs_words(d: Decision, th: Thresholds) -> str:
    """'the outputs are within 10 dB of the floor (logits 46.6 dB against 55.0 dB, top-1 32/32)'."""
    parts = []
    for name, v in (d.evidence.get("end_to_end") or {}).items():
        top = (f", top-1 {v['top1_agree']}/{v['top1_positions']}" if v.get("top1_positions") is not None else "")
        parts.append(f"{name} {fmt.db_unit(v.get('sqnr_db'))} against {fmt.db_unit(v.get('floor_sqnr_db'))}{top}")
    return f"the outputs are within {th.excess_ok_db:g} dB of the floor ({'; '.join(parts[:3])})"


def bug_sentence(d: Decision, found: Findings, th: Thresholds) -> str:
    hit = d.hit
    assert hit is not None and hit.local is not None
    row, le = found.rows[hit.suspect.tensor], hit.local
    words = _op_words(row)
    if hit.pinned is not None:  # the culprit is an op whose output the target never dumped
        p = hit.pinned
        words = f"{p.name} ({p.op_type}, position {p.position}; its output was not dumped, first seen in {ref_name(row)!r})"
    if d.kind == "input_not_copied":  # "bias only" is how it shows: the evidence's pattern_variant says so
        return (f"{words} reads the model input as zeros: its output is what it computes on an all-zero "
                f"input — the input was not copied (MNN online QNN needs shapeMutable=false).")
    what = _pattern_words(d.pattern, hit.best)
    allowed = (f"{th.quant_lsb_ok:g} quantization steps (it is off by {fmt.amount(le.max_err_lsb)})"
               if le.max_err_lsb is not None else
               f"≥ {fmt.db_unit(th.quant_local_ok_db)}" if found.quantized else f"≥ {fmt.db_unit(local_limit_db(le, th))}")
    return (f"{words} is the first failing op: {fmt.local_inputs(le.inputs)} it gives "
            f"SQNR {fmt.db_unit(le.sqnr_db)} where {'quantization' if found.quantized else 'fp16'} allows {allowed}"
            f"{'; ' + what if what else ''}.")


def _pattern_words(pattern: str, best: Trial | None) -> str:
    if best is None:
        return ""
    return {
        "nan_inf": "it produces NaN/Inf",
        "zero_input": f"it behaves as if {best.variant}",
        "bias_only": f"its output is the bias alone ({best.variant})",
        "wrong_coordinates": f"the output is reproduced with {best.variant}",
        "wrong_semantics": f"the output is reproduced with {best.variant}",
        "fused_activation_dropped": f"the output is the value before the activation: {best.variant}",
        "permutation": f"the output is reproduced with {best.variant}",
        "rotary_layout": f"the output is reproduced by a rotary embedding with {best.variant}",
        "scale_shift": f"{best.variant}",
        "constant": f"its output is constant ({best.variant})",
    }.get(pattern, best.variant)



# --- next steps --------------------------------------------------------------------------------------------

WRONG_NUMBERS = "playbooks/wrong-numbers.md"
SHAPE_MUTABLE = "playbooks/shape-mutable.md"
UNMARKED_OUTPUTS = "unmarked_outputs.npz"  # written by every htp-sim run (workers/htp_worker.py)
# Marked vs unmarked outputs closer than this to the output's own error: marking changed what is measured.
OBSERVER_MARGIN_DB = 10.0

MODEL = Var("MODEL", "the .onnx model the baseline was built from")
MNN_MODEL = Var("MNN_MODEL", "the .mnn model the device ran")
TESTDIR = Var("TESTDIR", "the MNN test dir the run used")
INPUTS = Var("INPUTS", "the .npz of inputs the baseline used")
FIXED_MODEL = Var("FIXED_MODEL", "the edited .onnx model")
FIXED_BASELINE = Var("FIXED_BASELINE", "a new output folder")
NEW_BASELINE = Var("NEW_BASELINE", "a new output folder")
NEW_TARGET = Var("NEW_TARGET", "the new dump (run folder, MNN dump folder or .npz)")
QDQ_MODEL = Var("QDQ_MODEL", "the re-calibrated QDQ .onnx model")
FLOAT_MODEL = Var("FLOAT_MODEL", "the float .onnx model before quantization")
EXPORT_DIR = Var("EXPORT_DIR", "the llmexport output folder (the one holding llm.mnn)")
THIS_RESULT = Var("THIS_RESULT", "this comparison: the diagnose --out folder, or the file compare --json FILE wrote")
INPUT_RANGE = Var("INPUT_RANGE", "each float input's real range as NAME=MIN:MAX, e.g. x=0:255 for raw pixels")



def _baseline_dir(r: CompareResult) -> Path:
    """The baseline directory when the reference is a baseline's ``reference/`` run, else the reference itself."""
    ref = Path(r.reference)
    return ref.parent if ref.name == REFERENCE_DIR and r.floor is not None else ref


def _inputs(r: CompareResult) -> list[Arg]:
    ref = Path(r.reference)
    return ["--inputs", _baseline_dir(r) / INPUTS_FILE if ref.name == REFERENCE_DIR else INPUTS]


def _model(r: CompareResult) -> Arg:
    return r.model if r.model else MODEL


def _mnn_model(r: CompareResult) -> Arg:
    return r.mnn_model if r.mnn_model else MNN_MODEL


def _is_htp_sim(r: CompareResult) -> bool:
    """Only htp-sim runs measure the observer effect (they also keep the unmarked outputs)."""
    return r.target_kind == "run" and r.observer_effect_db is not None


def _fusions(r: CompareResult) -> list[str]:
    """ORT fusions that changed HTP numerics in measured models and that this graph offers."""
    types = {t.op_type for t in r.tensors if t.op_type}
    found = []
    if "Conv" in types and "BatchNormalization" in types:
        found.append("ConvBNFusion")
    if "MatMul" in types and "Add" in types:  # transformer graphs
        found.append("MatMulAddFusion")
    return found


def undecided_steps(r: CompareResult) -> list[NextStep]:
    """What the verdict lacks: a floor and a re-run, both of which come from the ONNX model."""
    model: Arg = r.model if r.model and str(r.model).lower().endswith(".onnx") else MODEL
    ref = Path(r.reference)
    saved = ref.parent / INPUTS_FILE  # a baseline's reference/ (an .mnn baseline has no floor but has its inputs)
    inputs: list[Arg] = ["--inputs", saved if ref.name == REFERENCE_DIR and saved.is_file() else INPUTS]
    mnn: list[Arg] = ["--mnn-model", _mnn_model(r)] if r.target_kind == "mnn-dump" else []
    return [step("baseline", ["baseline", model, *inputs, "--out", NEW_BASELINE],
                 "Build the reference and its fp16 floor from the ONNX model with the inputs the target ran: the floor "
                 "says how much error fp16 alone gives."),
            step("compare", ["compare", NEW_BASELINE, r.target, "--model", model, *mnn],
                 "Compare again against that baseline: the suspect op is re-run on the target's own inputs and the "
                 "verdict becomes real_bug, precision or ok.")]


def precision_steps(r: CompareResult) -> list[NextStep]:
    if not _is_htp_sim(r):
        return _precision_mnn(r)
    base, run = _baseline_dir(r), Path(r.target)
    steps = [_observer_step(r, base, run)]
    fusions = _fusions(r)
    for opt in fusions:
        steps += _redump_steps(r, base, run, [opt], f"ORT's {opt} off")
    if not fusions:  # neither measured culprit is in this graph: try the other known fusions in one go
        steps += _redump_steps(r, base, run, _other_fusions(), "the other ORT fusions off")
    last = steps[-1]
    last.why = (f"{last.why.rstrip('.')}; if none of this changes the error, the loss is HTP's fp16 arithmetic "
                f"itself (rounding accumulated along the graph, or a LUT op such as Sigmoid or Softmax amplified "
                f"downstream), not a wrong op: see {WRONG_NUMBERS} (fp16 noise vs bug).")
    return steps


def _fusion_target() -> Target:
    """The target whose options switch graph fusions off: the fusions and the option come from its own hints."""
    from ..targets import TARGETS, target

    return next(target(n) for n in TARGETS if target(n).capabilities.fusion_switches)


def _other_fusions() -> list[str]:
    return [o for o in _fusion_target().known_fusions() if o not in ("ConvBNFusion", "MatMulAddFusion")]


def _redump_steps(r: CompareResult, base: Path, run: Path, optimizers: list[str], what: str) -> list[NextStep]:
    """Re-dump on the simulator with ``optimizers`` disabled, then compare marked tensors and unmarked outputs."""
    precision: list[Arg] = ["--precision", r.precision] if r.precision in ("fp16", "quantized") else []
    new = run.with_name(f"{run.name}-no-{'-'.join(optimizers) if len(optimizers) == 1 else 'fusions'}")
    tgt = _fusion_target()
    return [
        step("dump_qnn", ["dump", _model(r), "--target", tgt.name, *precision, *_inputs(r),
                          *tgt.fusion_option(optimizers), "--out", new],
             f"Re-dump with {what} (fusions change HTP numerics; marking blocks some of them); add the original "
             f"--soc/--arch if not soc {DEFAULT_SOC}."),
        step("compare", ["compare", base, new], f"Compare the re-dump with {what} tensor by tensor."),
        step("compare", ["compare", base, new / UNMARKED_OUTPUTS],
             f"Compare the re-dump's unmarked outputs with {what} (the graph as shipped)."),
    ]


def _observer_step(r: CompareResult, base: Path, run: Path) -> NextStep:
    """Compare the unmarked outputs (the graph as shipped) with the marked per-layer errors."""
    effect = r.observer_effect_db or {}
    marked = {t.name: t.metrics.get("sqnr_db") for t in r.tensors if t.name in effect}
    pairs = "; ".join(f"{k}: marked output SQNR {fmt.db_unit(marked.get(k))}, marked vs unmarked {fmt.observer(v)}"
                      for k, v in effect.items())
    return step("compare", ["compare", base, run / UNMARKED_OUTPUTS],
                f"Compare the unmarked output error with these marked per-layer errors: this measures the outputs "
                f"of the graph as shipped (no tensor marked); observer effect here ({pairs}): "
                f"{_observer_reading(marked, effect)}")


def _observer_reading(marked: dict[str, float | None], effect: dict[str, float]) -> str:
    """Whether marking moved the outputs by as much as their error (then the per-layer numbers mislead)."""
    close = [k for k, v in effect.items() if marked.get(k) is not None and v < (marked[k] or 0.0) + OBSERVER_MARGIN_DB]
    if close:
        return (f"marking moved {', '.join(close)} by about as much as the error itself, so the marked per-layer "
                f"errors describe a different graph; trust the unmarked comparison and bisect with the fusions below.")
    return ("marking barely moved the outputs compared with their error, so the marked per-layer errors describe "
            "the graph as shipped.")


def _precision_mnn(r: CompareResult) -> list[NextStep]:
    """MNN targets (device, host, MNN dumps): ORT fusions do not apply; check fp16 itself.

    No step suggests MNN ``precision=High`` as an fp32 check: on HTP the QNN graph is fp16 either way (graph
    precision FLOAT16 in MNN's QNN backend, ``fp16_relaxed_precision`` in the offline path)."""
    return [
        step("run_on_device", ["run", _mnn_model(r), "--target", "device", "--forward", "cpu", "--precision", "low",
                               "--baseline", _baseline_dir(r)],
             "Get a device-side fp16 floor by running the .mnn on the phone's CPU in fp16: an error of the same size "
             "there is fp16, not a wrong op (precision high is no fp32 check on HTP: its graph precision stays "
             "FLOAT16)."),
        step("diagnose", ["diagnose", _model(r), "--target", "htp-sim"],
             f"See how the same ONNX model behaves on the simulator, where fusion effects can be toggled; "
             f"background: {WRONG_NUMBERS} (fp16 noise vs bug)."),
    ]


def fp16_range_steps(r: CompareResult, ev: dict[str, Any]) -> list[NextStep]:
    """Remedies for a model that is not fp16-safe, each with why, most targeted first; each is checked by
    diagnosing the edited model, and the baseline of the edited model lists what is still out of range."""
    op, tensor, k = ev.get("op"), ev.get("tensor"), ev.get("rescale_exponent")
    source, construct = ev.get("rescale_input"), ev.get("scale_invariant")
    ref_max = float(ev.get("reference_max_abs") or 0.0)
    # sized on this sample only: what the user applies must hold over their input range, which only `fix` (given
    # --input-range) bounds; so the number is said as a lower bound and the exponent left to be sized there
    scale = "2^-K"
    sample_k = f"K at least {k}: 2^-{k} is what this sample alone needs" if k else "K sized on your largest input"
    where = f"`{source}` (the input of {op})" if source else f"the input of {op}"
    squaring = bool(ev.get("squaring"))
    shrink = "squares shrink with the square of the factor, so " if squaring else ""
    top = float(ev.get("region_max_abs") or ref_max)
    top_tensor = ev.get("region_max_tensor") or tensor
    after = top / (4.0 if squaring else 2.0) ** int(k or 1)
    largest = (f"`{top_tensor}`, the largest value up to the normalisation, drops from {top:.3g}"
               if top_tensor != tensor else f"`{tensor}` drops from {ref_max:.3g}")
    check: list[Arg] = ["diagnose", FIXED_MODEL, "--target", "htp-sim", *_inputs(r)]
    remedies = []
    if construct:
        why = {"L2-norm": "x / ||x|| is unchanged when x is scaled",
               "RMSNorm": "x / rms(x) is unchanged when x is scaled (scale eps by the square of the factor)",
               "LayerNorm": "(x - mean) / std is unchanged when x is scaled (scale eps by the square of the factor)",
               "Softmax input": "softmax(x - max(x)) equals softmax(x), and the shifted logits stay small"}[str(construct)]
        remedies.append(f"Or rescale by hand by a power of two around the scale-invariant {construct}: "
                        f"{_rescale_place(ev, scale)} ({sample_k}; at 2^-{k or 'k'} {shrink}{largest} to about "
                        f"{after:.3g}, {_headroom(after)} inside fp16's 65504 for this sample only; other inputs of "
                        f"your range reach more, so size K over the declared range, as `fix --input-range` does), "
                        f"then diagnose the edited model; why: {why}, and a power of two is exact in fp16, so nothing "
                        f"else changes.")
    else:
        remedies.append(f"Rescale by a power of two: multiply {where} by {scale} and undo it after the value is back "
                        f"in range ({sample_k}, where `{tensor}` reaches {ref_max:.3g}; size K on the largest input "
                        f"of your range, not this sample; fp16 holds 65504, HTP saturates at 131008), then diagnose "
                        f"the edited model; why: a power of two is exact in fp16, so only the range changes.")
    remedies.append(f"Or move the reduction earlier: average instead of summing (ReduceMean, or divide by the count "
                    f"before {op}) so partial results stay in range, then diagnose the edited model; why: a sum of N "
                    f"squares grows N times faster than its mean, and the mean is what the normalisation needs.")
    remedies.append(f"Or keep this region off the NPU (run {op} and its normalisation on CPU, split the graph there), "
                    "then diagnose the edited model; why: MNN's precision=High does not help — on HTP the QNN graph is "
                    "fp16 either way (graph precision FLOAT16; the offline path sets fp16_relaxed_precision), so only "
                    "another backend holds the value.")
    steps = [step("diagnose", check, why) for why in remedies]
    if construct:  # first: the only advice sized over the whole input range, not this sample
        steps.insert(0, step("fix_and_prove", ["fix", THIS_RESULT, "--input-range", INPUT_RANGE],
                             f"Let the tool write the rescale and prove it: it sizes the power of two by the interval "
                             f"bound over the declared input range (every input in it, not only this sample, which "
                             f"alone needs 2^-{k or 'k'}), writes new .fp16-rescaled.onnx and .mnn files beside "
                             f"yours and checks fp32 equivalence, the range on the sample and the range's corner, "
                             f"the simulator run and the .mnn on MNN CPU."))
    steps.append(step("baseline", ["baseline", FIXED_MODEL, *_inputs(r), "--out", FIXED_BASELINE],
                      "After the change, check the range before the device: the baseline of the edited model lists "
                      "the tensors that are still not fp16-safe (baseline.json `ranges`)."))
    return steps


HEADROOM_WORDS = "4"  # overflow.HEADROOM, in words


def _headroom(after: float) -> str:
    """How far inside 65504 the rescaled largest value lands: the measured factor (a power of two rounds the
    design headroom of 4 up, so it is 4 to 16), never the design figure passed off as the result."""
    if after <= 0:
        return f"at least a factor {HEADROOM_WORDS}"
    return f"a factor {65504.0 / after:.3g}"
_WEIGHTED = {"Conv": "W and B", "ConvTranspose": "W and B", "Gemm": "B and C (or alpha and C)",
             "MatMul": "its weight (and the bias Add right after it, if any)"}


def _rescale_place(ev: dict[str, Any], scale: str) -> str:
    """Where the factor goes so that only the normalisation sees it: folded into the producing op when every reader
    of the value is inside the normalisation, else one Mul feeding exactly the readers inside it."""
    source, op = ev.get("rescale_input"), ev.get("op")
    inside, outside = list(ev.get("rescale_uses_inside") or []), list(ev.get("rescale_uses_outside") or [])
    producer, ptype = ev.get("rescale_producer"), ev.get("rescale_producer_type")
    if source is None:
        return f"multiply the input of {op} by {scale}, and every other use of it inside the normalisation"
    readers = ", ".join(inside) if inside else str(op)
    only = f" — scaling only {op}'s input would change the result"
    if not outside and ptype in _WEIGHTED:
        return (f"fold {scale} into {producer}'s weights ({ptype}: multiply {_WEIGHTED[str(ptype)]} by {scale}), so "
                f"that every reader of `{source}` ({readers}, all inside the normalisation) sees the scaled value{only}")
    if not outside and producer is None:
        return (f"scale the model input `{source}` by {scale} (in preprocessing, or one Mul by {scale} right after "
                f"the input feeding all its readers: {readers}){only}")
    rest = f"; {', '.join(outside[:4])} keep reading the unscaled `{source}`" if outside else ""
    return (f"insert one Mul(`{source}`, {scale}) and feed it to every reader of `{source}` inside the normalisation "
            f"({readers}){rest}{only}")


def real_bug_steps(r: CompareResult) -> list[NextStep]:
    ff = r.first_failing
    pattern = f" for the `{r.verdict.pattern}` pattern" if r.verdict.pattern != "none" else ""
    playbook = (f"then follow {WRONG_NUMBERS}{pattern}: the classic causes of a wrong op in MNN's QNN backend and "
                f"how to confirm each")
    op: Arg = ff.op_type if ff is not None and ff.op_type else Var("OP_TYPE", "the first failing op's type")
    where = f" ({ff.op})" if ff is not None and ff.op else ""
    subject = ff.op_type if ff is not None and ff.op_type else "the op"
    probe = list(ff.probe) if ff is not None and ff.op_type else []
    shapes = " with its real input shapes and attributes" if probe else ""
    steps = [step("lookup_op_constraints", ["op", op, "--probe", *probe],
                  f"Check {subject}'s QNN/HTP constraints{where} and known MNN traps, and try it alone on the "
                  f"simulator{shapes}; {playbook}.")]
    if "local_error" in r.verdict.evidence:
        steps.append(step("compare", ["compare", _baseline_dir(r), r.target, "--model", _model(r)],
                          "Let compare re-run the op on CPU to confirm."))
    return steps


def input_not_copied_steps(r: CompareResult) -> list[NextStep]:
    """Zeros: the input was not copied. A copy that differs otherwise may just be a baseline built from other
    data, which is the cheaper check, so it comes first."""
    steps = []
    mismatch = r.verdict.evidence.get("input_mismatch")
    if isinstance(mismatch, dict):
        mnn: list[Arg] = ["--mnn-model", _mnn_model(r)] if r.target_kind == "mnn-dump" else []
        steps.append(step("baseline", ["baseline", _model(r), "--inputs", TESTDIR, "--out", NEW_BASELINE],
                          f"Rebuild the baseline from the inputs the device used (the MNN test dir, or an .npz of "
                          f"{mismatch.get('input')!r} as it was fed)."))
        steps.append(step("compare", ["compare", NEW_BASELINE, r.target, *mnn],
                          "Compare again with the rebuilt baseline"
                          + (" (with the same --mnn-model)" if mnn else "")
                          + ": if the input then matches, the first comparison only used other data."))
    first = "Otherwise set" if steps else "Set"
    steps.append(step("toggle_shapeMutable", ["toggle-shape-mutable", TESTDIR, "--value", "false"],
                      f"{first} shapeMutable to false in the MNN test dir the run used; why online QNN needs it, and "
                      f"the other shape traps: {SHAPE_MUTABLE}."))
    steps.append(step("run_on_device", ["run", _mnn_model(r), "--testdir", TESTDIR],
                      "Run the test dir again with shapeMutable false, then compare again."))
    return steps


def encoding_range_steps(r: CompareResult, ev: dict[str, Any]) -> list[NextStep]:
    """A device encoding that clips the data: widen it where it is set, then check again."""
    tensor = ev.get("tensor")
    lo, hi = ev.get("device_range") or [None, None]
    rlo, rhi = ev.get("reference_range") or [None, None]
    model = ev.get("model_range")
    calibrated = (f"; the model's own QDQ encoding spans [{model[0]:.4g}, {model[1]:.4g}], so the device run used "
                  f"another encoding than the model's (a re-export, an inherited scale, or calibration on other data)"
                  if isinstance(model, list) and None not in model else "")
    return [
        step("compare", ["compare", _baseline_dir(r), NEW_TARGET],
             f"Widen the encoding of `{tensor}` to cover its data — the device range is [{lo:.4g}, {hi:.4g}] while "
             f"the reference spans [{rlo:.4g}, {rhi:.4g}]; re-calibrate with representative inputs or set its scale "
             f"from the real range{calibrated} — then dump again and compare: values beyond the range are clipped "
             f"to the rail, which no later op can undo, and the clipping is gone when no tensor shows an "
             f"`encoding_range` finding (background: {WRONG_NUMBERS})."),
        step("check_llm_export", ["llm-check", EXPORT_DIR],
             f"If `{tensor}` is a Mul output (e.g. SwiGLU gate*up in an LLM export), give it its own calibrated "
             f"scale instead of one operand's — a product inherits neither operand's range, so a copied scale "
             f"saturates (llm-check lists the Mul outputs that reuse an operand's encoding); for 16-bit "
             f"activations, also check the encoding is not unsigned for data with negative values."),
    ]


def quantization_steps(r: CompareResult) -> list[NextStep]:
    worst = r.verdict.evidence.get("worst_excess", {}).get("tensor")
    row = next((t for t in r.tensors if t.name == worst), None)
    where = f"{worst!r}" if worst else "the worst tensor"
    span = ""
    if row is not None and row.metrics.get("max_abs_ref") is not None:
        span = f" (its reference values reach ±{row.metrics['max_abs_ref']:.3g})"
    return [
        step("diagnose", ["diagnose", QDQ_MODEL, "--precision", "quantized"],
             f"Check the encodings and calibration of {where}: its scale/offset (`tensors[].quant` in "
             f"{Path(r.target) / 'run.json'}) against its real value range{span} — a range calibrated much wider "
             f"than the data wastes steps, a narrower one clips; if the encodings match the data but the loss is "
             f"too large, re-calibrate with representative inputs or 16-bit activations (onnxruntime.quantization "
             f"get_qnn_qdq_config, activation_type=QUInt16) and diagnose again."),
        step("baseline", ["baseline", FLOAT_MODEL, *_inputs(r)],
             f"To see what quantization costs against fp32, build a baseline of the float model on the same inputs "
             f"and compare this run with it; background: {WRONG_NUMBERS}."),
    ]
