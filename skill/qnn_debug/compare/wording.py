"""The wording stage's sentences: a :class:`~.verdict.Decision` and the findings it rests on become the verdict's
summary sentence (the next steps are in :mod:`.steps` and :mod:`.steps_range`).

Every sentence of a comparison is built here, from numbers the earlier stages measured; nothing here decides.
Each verdict rule (:mod:`.rules`) uses one sentence function from here and one next-steps function from :mod:`.steps`.
The summary states the verdict with its numbers (SQNR against the reference and the floor, local error,
ranges, encodings) and what they mean.
Why the steps are what they are is said in :mod:`.steps`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import fmt
from .local_error import local_limit_db
from .patterns import Trial
from .schema import FirstFailing, TensorRow, Verdict
from .shipped import shipped_words
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
    pass


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
    shipped = shipped_words(o.shipped, o.tensor) if o.shipped else ""
    return (f"Precision, not a wrong op: the model is not fp16-safe. {where} is the first op whose reference "
            f"output leaves the fp16 range: `{o.tensor}` reaches {o.ref_max:.3g} (fp16 max 65504) while its "
            f"inputs stay within ±{o.input_max:.3g}{inside}; {target}.{floor_words}{shipped} Rescale by a power of "
            f"two around it: this sample alone needs 2^-{o.rescale_exponent()}, other inputs of your range can need "
            f"more, so size it over the declared input range (`qnn-debug fix` does, see next steps).")


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
        "missing_op": f"the output is reproduced with {best.variant}",
    }.get(pattern, best.variant)
