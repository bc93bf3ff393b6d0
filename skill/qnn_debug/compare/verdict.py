"""Turn the findings of a comparison into the verdict: kind, pattern, confidence, one sentence, evidence.

Decision order (never from end-to-end error or cosine alone — cosine recovers with depth while the error
stays):
1. the target's copy of a graph input is all zeros → ``input_not_copied`` (MNN ``shapeMutable=true``), the
   first failing op being the first op that reads that input; its first observation (a backend copy) differs
   otherwise → ``input_not_copied`` with moderate confidence: other baseline data or an uncopied input, and
   no downstream op can be blamed since the error starts before any op;
2. the first suspect (a jump beyond the floor) whose *local* error is large is a wrong op →
   ``real_bug``, or ``input_not_copied`` when it reads a graph input and behaves as if it were zeros;
3. otherwise a quantized target → ``quantization``; a target clearly worse than the floor (or with
   suspects that are fine locally) → ``precision``; else ``ok``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import fmt
from .drift import drift_words, find_drift
from .local_error import local_limit_db
from .localize import OpNode, Suspect
from .overflow import Overflow
from .patterns import Trial
from .quant_detect import RangeClip
from .schema import FirstFailing, LocalError, Pattern, TensorRow, Verdict
from .thresholds import OUTPUT_OK_DB, Thresholds

MAX_TRIALS_IN_EVIDENCE = 10


@dataclass
class Finding:
    """A suspect after its local re-run and pattern tests."""

    suspect: Suspect
    local: LocalError | None
    best: Trial | None = None
    trials: list[Trial] = field(default_factory=list)
    reads_graph_input: bool = False
    pinned: OpNode | None = None  # an op inside the re-run segment that the matching pattern edited


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
class Findings:
    rows: dict[str, TensorRow]  # reference tensor -> the row localisation used (its first observation)
    findings: list[Finding]
    quantized: bool
    outputs: list[str]
    zero_inputs: list[str] = field(default_factory=list)  # graph inputs the target holds as all zeros
    zero_observations: dict[str, list[str]] = field(default_factory=dict)  # ... and the target tensors that are
    input_consumers: dict[str, OpNode] = field(default_factory=dict)  # graph input -> first consuming op
    input_mismatches: list[InputMismatch] = field(default_factory=list)  # copies of inputs that differ
    uncompared: list[str] = field(default_factory=list)  # model tensors the target has but could not be judged
    local_unavailable: str | None = None  # why no op could be re-run (no model, ...)
    observer_effect_db: dict[str, float] | None = None
    has_floor: bool = True  # False: excess was judged against the fixed fp16 level, not a floor run
    all_rows: list[TensorRow] = field(default_factory=list)  # every row, aliases included (default: ``rows``)
    overflow: Overflow | None = None  # the first op whose reference output leaves the fp16 range (target at the rail)
    range_clip: RangeClip | None = None  # the first tensor whose device encoding clips the data (quantized targets)
    quantized_by: list[str] = field(default_factory=list)  # what says the target is quantized

    def every_row(self) -> list[TensorRow]:
        return self.all_rows or list(self.rows.values())


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(float(x), nd)


def _ref_name(row: TensorRow) -> str:
    """The reference tensor a row compares against (its own name unless it is an alias row)."""
    return row.stands_for or row.name


def _row_evidence(row: TensorRow) -> dict[str, Any]:
    m, f = row.metrics, row.floor_metrics or {}
    seen = {"observed_as": row.name} if row.stands_for else {}
    return {"tensor": _ref_name(row), **seen, "op": row.op, "op_type": row.op_type, "position": row.position,
            "target_sqnr_db": _r(m.get("sqnr_db")), "floor_sqnr_db": _r(f.get("sqnr_db")),
            "target_diff_rate": m.get("diff_rate"), "floor_diff_rate": f.get("diff_rate"),
            "cosine": m.get("cosine"), "excess_db": _r(row.excess_db), "jump_db": _r(row.jump_db)}


def _end_to_end(fs: Findings) -> dict[str, Any]:
    out = {}
    direct = {r.name: r for r in fs.every_row() if r.stands_for is None}
    for name in fs.outputs:
        row = direct.get(name) or fs.rows.get(name)  # the output as the application reads it
        if row is not None:
            out[name] = {"sqnr_db": _r(row.metrics.get("sqnr_db")), "diff_rate": row.metrics.get("diff_rate"),
                         "cosine": row.metrics.get("cosine"),
                         "floor_sqnr_db": _r((row.floor_metrics or {}).get("sqnr_db"))}
    return out


def _worst(fs: Findings) -> TensorRow | None:
    judged = [r for r in fs.every_row() if r.excess_db is not None]
    return max(judged, key=lambda r: r.excess_db or 0.0) if judged else None


def _below(row: TensorRow, fs: Findings, th: Thresholds) -> str:
    """'20.4 dB below the 60 dB fp16 level (the floor is exact; …)': the excess and what it is measured from."""
    return fmt.shortfall(row.excess_db, (row.floor_metrics or {}).get("sqnr_db"), th.floor_cap_db,
                         has_floor=fs.has_floor, quantized=fs.quantized)


def _quant_worst(row: TensorRow, fs: Findings, th: Thresholds) -> str:
    """The worst quantized tensor in words: what the fp16 floor means there, and that the step is the yardstick."""
    floor = (row.floor_metrics or {}).get("sqnr_db")
    head = f"the worst tensor {row.name!r} has SQNR {fmt.db_unit(row.metrics.get('sqnr_db'))} against the reference"
    if fs.has_floor and floor is not None and floor >= th.floor_cap_db:
        return (f"{head}, {fmt.amount(row.excess_db)} dB short of the {th.floor_cap_db:g} dB fp16 level; no fp16 floor "
                f"applies there (fp16 rounding leaves its quantized values unchanged: the floor is "
                f"{fmt.db_unit(floor)}), so the quantization step is the yardstick")
    return f"{head}, {_below(row, fs, th)}, which is what quantization costs; the quantization step is the yardstick"


def _confirmed(fs: Findings) -> Finding | None:
    for f in fs.findings:
        if f.local is not None and f.local.ok is False:
            return f
    return None


def decide(fs: Findings, th: Thresholds) -> tuple[Verdict, FirstFailing | None]:
    base: dict[str, Any] = {"end_to_end": _end_to_end(fs)}
    floor = "the fp16 floor" if fs.has_floor else f"a fixed fp16 level of {th.floor_cap_db:g} dB (no floor run)"
    if not fs.has_floor:
        base["floor"] = f"none: tensors judged against {th.floor_cap_db:g} dB SQNR"
    if fs.observer_effect_db:
        base["observer_effect_db"] = fs.observer_effect_db
    worst = _worst(fs)
    if worst is not None:
        base["worst_excess"] = {"tensor": worst.name, "excess_db": _r(worst.excess_db)}

    if fs.zero_inputs:
        return _zero_input_verdict(fs, base)
    if fs.input_mismatches:
        return _input_mismatch_verdict(fs, base)
    if fs.quantized_by:
        base["quantized_by"] = fs.quantized_by
    hit = _confirmed(fs)
    if fs.range_clip is not None and (hit is None or hit.suspect.op.position >= fs.range_clip.row.position):
        verdict, at = _range_clip_verdict(fs, base, hit)
        return _discount_uncompared(verdict, fs), at
    if fs.overflow is not None and (hit is None or hit.suspect.op.position >= fs.overflow.op.position):
        verdict, at = _overflow_verdict(fs, base, hit)
        return _discount_uncompared(verdict, fs), at
    verdict, first = _decide_ops(fs, th, base, worst, floor)
    if not fs.quantized:
        drift = find_drift(list(fs.rows.values()), th)
        if drift is not None:
            verdict.evidence["drift"] = drift
            if verdict.kind in ("ok", "precision"):
                verdict.summary += drift_words(drift)
    return _discount_uncompared(verdict, fs), first


def _range_clip_verdict(fs: Findings, base: dict[str, Any], hit: Finding | None) -> tuple[Verdict, FirstFailing]:
    """A device encoding narrower than the data: quantization, located at that tensor (not a wrong op: the
    target is the reference clipped at the encoding's range)."""
    c = fs.range_clip
    assert c is not None
    row = c.row
    ev: dict[str, Any] = {**base, **_row_evidence(row), "encoding_range": c.evidence()}
    if hit is not None:
        ev["downstream_suspect"] = {"tensor": hit.suspect.tensor, "op": hit.suspect.op.name,
                                    "note": "its error follows from the clipped encoding upstream"}
    enc = (f"scale {c.scale:.4g}, offset {c.offset}" if c.scale is not None else
           f"step {c.step:.4g}, inferred from the target's values")
    calibrated = (f"; the model's calibrated range is [{c.model_range[0]:.4g}, {c.model_range[1]:.4g}]"
                  if c.model_range is not None else "")
    summary = (f"Quantization, not a wrong op: the device encoding of {_ref_name(row)!r} ({_op_words(row)}) clips the "
               f"data. Its range is [{c.lo:.4g}, {c.hi:.4g}] ({enc}){calibrated}, while the reference spans "
               f"[{c.ref_min:.4g}, {c.ref_max:.4g}]: {100 * c.outside_share:.1f}% of the reference lies outside, "
               f"{100 * c.at_rail_share:.1f}% of the target sits at the rail, and the reference clipped at that range "
               f"reproduces the target at {fmt.db_unit(c.clip_sqnr_db)} (the target against the reference: "
               f"{fmt.db_unit(c.raw_sqnr_db)}; elements inside the range: {fmt.db_unit(c.in_range_sqnr_db)}).")
    first = FirstFailing(tensor=_ref_name(row), op=row.op, op_type=row.op_type, position=row.position,
                         observed_as=row.name if row.stands_for else None)
    return Verdict(kind="quantization", pattern="encoding_range", confidence=0.85, summary=summary, evidence=ev), first


def _overflow_verdict(fs: Findings, base: dict[str, Any], hit: Finding | None) -> tuple[Verdict, FirstFailing]:
    """The model is not fp16-safe: the first op leaving the fp16 range is where the run goes wrong, whatever
    its local re-run says (an fp32 re-run of an op whose result fp16 cannot hold always disagrees)."""
    o = fs.overflow
    assert o is not None
    ev: dict[str, Any] = {**base, "fp16_range": o.evidence()}
    if o.row is not None:
        ev.update(_row_evidence(o.row))
    if hit is not None:
        ev["downstream_suspect"] = {"tensor": hit.suspect.tensor, "op": hit.suspect.op.name,
                                    "local_sqnr_db": _r(hit.local.sqnr_db if hit.local else None),
                                    "note": "its error follows from the overflow upstream"}
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
        target = f"the target tops out at {o.target_max:.6g} and is badly off there (SQNR {fmt.db_unit(o.row.metrics.get('sqnr_db'))})"
    else:
        target = f"the target tops out at {o.target_max:.6g}, {o.at_rail} of {o.size} values at the ±65504 fp16 rail"
    inside = " (beyond 65504, but within what HTP holds: 131008)" if o.input_max > 65504.0 else ""
    outs = _end_to_end(fs)
    floors = [v.get("floor_sqnr_db") for v in outs.values() if v.get("floor_sqnr_db") is not None]
    floor_words = (f" The fp16 floor fails the same way (worst output {fmt.db_unit(min(floors))}): no fp16 engine can "
                   f"run this as is." if floors and min(floors) < OUTPUT_OK_DB else
                   " No fp16 engine can run this as is.")
    summary = (f"Precision, not a wrong op: the model is not fp16-safe. {where} is the first op whose reference "
               f"output leaves the fp16 range: `{o.tensor}` reaches {o.ref_max:.3g} (fp16 max 65504) while its "
               f"inputs stay within ±{o.input_max:.3g}{inside}; {target}.{floor_words} Rescale by 2^{o.rescale_exponent()} "
               f"around it (see next steps).")
    first = FirstFailing(tensor=o.tensor, op=o.op.name, op_type=o.op.op_type, position=o.op.position,
                         observed_as=o.row.name if o.row is not None and o.row.stands_for else None,
                         local_error=hit.local if hit is not None and hit.suspect.op.name == o.op.name else None)
    confidence = 0.9 if o.row is not None else 0.6
    return Verdict(kind="precision", pattern="nan_inf", confidence=confidence, summary=summary, evidence=ev), first


def _discount_uncompared(verdict: Verdict, fs: Findings) -> Verdict:
    """A verdict that could not see some tensors the model produces must not claim to have checked them all
    (a verdict that found a fault stands: what it found does not depend on the unseen tensors)."""
    if not fs.uncompared:
        return verdict
    verdict.evidence["not_compared"] = fs.uncompared[:10]
    if verdict.kind in ("ok", "precision", "quantization"):  # claims of absence: they rest on every tensor
        verdict.confidence = round(min(verdict.confidence, 0.5), 2)
        verdict.summary = verdict.summary.replace("every tensor", "every compared tensor")
        verdict.summary += (f" {len(fs.uncompared)} tensor(s) the target holds could not be compared: "
                            + "; ".join(fs.uncompared[:3]) + ".")
    return verdict


def _decide_ops(fs: Findings, th: Thresholds, base: dict[str, Any], worst: TensorRow | None,
                floor: str) -> tuple[Verdict, FirstFailing | None]:
    """The verdict from the ops once the inputs are known to be right: a confirmed bug, quantization,
    precision or ok."""
    hit = _confirmed(fs)
    if hit is not None:
        return _bug_verdict(fs, hit, base, th)

    checked = [f for f in fs.findings if f.local is not None and f.local.ok is not None]
    unresolved = [f for f in fs.findings if f.local is None or f.local.ok is None]  # could not be re-run
    suspects = [f.suspect for f in fs.findings]
    ev = {**base, "suspects_checked": [
        {**_row_evidence(fs.rows[f.suspect.tensor]), "local_sqnr_db": _r(f.local.sqnr_db if f.local else None),
         "local_ok": f.local.ok if f.local else None, "local_max_err_lsb": f.local.max_err_lsb if f.local else None}
        for f in fs.findings[:5]]}
    if fs.local_unavailable:
        ev["local_error"] = fs.local_unavailable
    if unresolved:
        s0 = unresolved[0].suspect
        first = fs.rows[s0.tensor]
        why = fs.local_unavailable or (unresolved[0].local.note if unresolved[0].local else None) or "no re-run"
        if (first.metrics.get("sqnr_db") or 0.0) < 20.0 and s0.jump_db >= 2 * th.jump_db:
            # no way to re-run the op: a huge jump is still most likely a bug, but say how sure we are
            return (Verdict(kind="real_bug", pattern="none", confidence=0.45,
                            summary=f"{_op_words(first)} is the first op whose output departs from the reference "
                                    f"({fmt.amount(s0.jump_db)} dB jump beyond {floor}); it could not be "
                                    f"re-run to confirm ({why}).",
                            evidence={**ev, **_row_evidence(first)}),
                    FirstFailing(tensor=_ref_name(first), op=first.op, op_type=first.op_type, position=first.position,
                                 observed_as=first.name if first.stands_for else None))
    if fs.quantized:
        if checked:
            sq = [f.local.sqnr_db for f in checked if f.local and f.local.sqnr_db is not None]
            lsb = [f.local.max_err_lsb for f in checked if f.local and f.local.max_err_lsb is not None]
            clause = (f"the {len(checked)} op(s) where the error jumps reproduce the target on their own inputs "
                      f"within quantization noise (local SQNR ≥ {fmt.db_unit(min(sq)) if sq else fmt.NONE}"
                      f"{f', worst {fmt.amount(max(lsb))} of the {th.quant_lsb_ok:g} quantization steps allowed' if lsb else ''})")
        else:
            clause = "no op's error jumps beyond what its inputs already carry"
        worst_txt = _quant_worst(worst, fs, th) if worst else "no tensor could be judged"
        return (Verdict(kind="quantization", pattern="none", confidence=0.85 if checked else 0.7,
                        summary=f"Quantization error, not a bug: {worst_txt}; {clause}.",
                        evidence={**ev, "checked_ops": len(checked)}), None)
    degraded = worst is not None and (worst.excess_db or 0.0) >= th.excess_ok_db
    if degraded or suspects:
        where = (f"the worst tensor {worst.name!r} has SQNR {fmt.db_unit(worst.metrics.get('sqnr_db'))}, "
                 f"{_below(worst, fs, th)}" if worst else f"the target is worse than {floor}")
        why = ("no op shows a jump beyond the floor" if not suspects else
               "every suspect op reproduces the target on its own inputs" if not unresolved else
               f"{len(unresolved)} suspect op(s) could not be re-run to tell (see evidence)")
        return (Verdict(kind="precision", pattern="none", confidence=0.55 if unresolved else 0.75,
                        summary=f"Precision, not a wrong op: {where}, but {why}.", evidence=ev), None)
    poor = _poor_floor_outputs(fs, th)
    if poor:
        words = ", ".join(f"{n!r} {fmt.db_unit(db)}" for n, db in poor[:3])
        return (Verdict(kind="precision", pattern="none", confidence=0.7,
                        summary=f"Precision: the target is at the fp16 floor, but the floor itself is not acceptable "
                                f"(graph output SQNR {words}, below {th.output_ok_db:g} dB): no fp16 engine can run "
                                f"this as is.",
                        evidence={**ev, "poor_floor_outputs": dict(poor)}), None)
    summary = f"Healthy: every tensor is at the error level of {floor}."
    if worst is not None and (worst.excess_db or 0.0) >= 0.05:
        summary = (f"Healthy: every tensor is within {th.excess_ok_db:g} dB of {floor} "
                   f"(worst {worst.name!r}, {fmt.amount(worst.excess_db)} dB).")
    return Verdict(kind="ok", pattern="none", confidence=0.9 if fs.rows else 0.3, summary=summary, evidence=ev), None


def _poor_floor_outputs(fs: Findings, th: Thresholds) -> list[tuple[str, float]]:
    """Graph outputs whose fp16-floor SQNR is below the acceptable level while the target is no better (a target
    that beats a broken floor, e.g. HTP holding values up to 131008 that the floor clips at 65504, is fine)."""
    out = []
    for name, v in _end_to_end(fs).items():
        db, own = v.get("floor_sqnr_db"), v.get("sqnr_db")
        if db is not None and db < th.output_ok_db and (own is None or own < th.output_ok_db):
            out.append((name, float(db)))
    return out


def _zero_input_verdict(fs: Findings, base: dict[str, Any]) -> tuple[Verdict, FirstFailing]:
    """The input never reached the target: the first op reading it is where the run goes wrong."""
    name = fs.zero_inputs[0]
    consumer = fs.input_consumers.get(name)
    ev: dict[str, Any] = {**base, "input": name, "first_consumer": consumer.name if consumer else None,
                          "zero_observations": fs.zero_observations.get(name, [name]),
                          "detail": "the target's copy of this graph input is all zeros while the reference input is not"}
    ev, first = _at_consumer(fs, name, ev)
    reads = f"; {consumer.name} ({consumer.op_type}) is the first op to read it" if consumer else ""
    return (Verdict(kind="input_not_copied", pattern="zero_input", confidence=0.95,
                    summary=f"The model input {name!r} never reached the target: its copy there is all zeros"
                            f"{reads} (MNN online QNN needs shapeMutable=false).", evidence=ev), first)


def _input_mismatch_verdict(fs: Findings, base: dict[str, Any]) -> tuple[Verdict, FirstFailing]:
    """The error starts at a graph input, before any op: either the baseline used other data or the input
    was not copied into the QNN graph; nothing in the comparison tells the two apart, so say both."""
    m = fs.input_mismatches[0]
    consumer = fs.input_consumers.get(m.name)
    ev: dict[str, Any] = {**base, "input": m.name, "first_consumer": consumer.name if consumer else None,
                          "input_mismatch": {"input": m.name, "observed_as": m.observed_as, "sqnr_db": _r(m.sqnr_db),
                                             "constant": m.constant, "nonfinite": m.nonfinite},
                          "detail": "the target's first copy of this graph input differs from the reference input"}
    if len(fs.input_mismatches) > 1:
        ev["other_inputs"] = [o.name for o in fs.input_mismatches[1:]]
    ev, first = _at_consumer(fs, m.name, ev)
    if m.nonfinite:
        how = f"holds NaN/Inf ({m.nonfinite} of {m.size} values)"
    elif m.constant is not None:
        how = f"is constant (every value {m.constant:.6g}) while the reference input is not"
    else:
        how = f"differs from the reference input (SQNR {fmt.db_unit(m.sqnr_db)})"
    reads = f" {consumer.name} ({consumer.op_type}) is the first op to read it." if consumer else ""
    summary = (f"The target's copy of input {m.name!r} ({m.observed_as}) {how}: either the baseline was built "
               f"from other data — rebuild it with `qnn-debug baseline \"$MODEL\" --inputs \"$INPUTS\"` "
               f"(MODEL: the model; INPUTS: the test dir or .npz the device used) — or the input was not copied into the QNN graph (shapeMutable=true, Tensor usage "
               f"is 1.). The error starts before any op, so no downstream op is blamed.{reads}")
    return (Verdict(kind="input_not_copied", pattern="constant" if m.constant is not None else "none",
                    confidence=0.6, summary=summary, evidence=ev), first)


def _at_consumer(fs: Findings, name: str, ev: dict[str, Any]) -> tuple[dict[str, Any], FirstFailing]:
    """First failing = the first op reading graph input ``name`` (with its numbers), else the input itself."""
    consumer = fs.input_consumers.get(name)
    first = FirstFailing(tensor=name, op=None, op_type=None, position=-1)
    if consumer is not None:
        out = consumer.outputs[0] if consumer.outputs else name
        row = fs.rows.get(out)
        if row is not None:  # its numbers, as for any first failing op (the input itself is in "input")
            ev = {**ev, **_row_evidence(row)}
        first = FirstFailing(tensor=out, op=consumer.name, op_type=consumer.op_type, position=consumer.position,
                             observed_as=row.name if row is not None and row.stands_for else None)
    return ev, first


def _op_words(row: TensorRow) -> str:
    return f"{row.op or row.name} ({row.op_type or '?'}, position {row.position})"


def _bug_verdict(fs: Findings, hit: Finding, base: dict[str, Any], th: Thresholds) -> tuple[Verdict, FirstFailing]:
    s = hit.suspect
    row = fs.rows[s.tensor]
    le = hit.local
    assert le is not None
    pattern: Pattern = hit.best.pattern if hit.best is not None else "none"  # type: ignore[assignment]
    kind = "input_not_copied" if pattern in ("zero_input", "bias_only") and hit.reads_graph_input else "real_bug"
    if kind == "input_not_copied":
        pattern = "zero_input"  # the input is what is missing; "bias only" is how it shows (in the evidence)
    confidence = 0.6
    if le.sqnr_db is not None and le.sqnr_db < 20.0:
        confidence += 0.2
    if hit.best is not None:
        confidence += 0.15
    if s.segment:
        confidence -= 0.1  # several unseen ops were re-run together; the culprit is one of them
    ev: dict[str, Any] = {**base, **_row_evidence(row), "input_excess_db": _r(s.input_excess_db),
                          "local_sqnr_db": _r(le.sqnr_db), "local_expected_sqnr_db": _r(le.expected_sqnr_db),
                          "local_max_abs": le.max_abs, "local_max_err_lsb": le.max_err_lsb,
                          "segment": le.segment}
    if hit.best is not None:
        also = sorted({t.variant for t in hit.trials if t.matched and t is not hit.best and t.pattern != hit.best.pattern})
        if also:
            ev["also_reproduced_by"] = also
        ev["pattern_variant"] = hit.best.variant
        ev["pattern_sqnr_db"] = _r(hit.best.sqnr_db)
        ev["pattern_details"] = hit.best.details
    ev["trials"] = [{"pattern": t.pattern, "variant": t.variant, "sqnr_db": _r(t.sqnr_db), "matched": t.matched}
                    for t in sorted(hit.trials, key=lambda t: -(t.sqnr_db if t.sqnr_db is not None else 300.0))
                    [:MAX_TRIALS_IN_EVIDENCE]]
    others = [f.suspect for f in fs.findings if f is not hit and f.local is not None and f.local.ok is False]
    if others:
        ev["later_suspects"] = [{"tensor": o.tensor, "op": o.op.name, "jump_db": _r(o.jump_db)} for o in others[:5]]
    what = _pattern_words(pattern, hit.best)
    first = FirstFailing(tensor=_ref_name(row), op=row.op, op_type=row.op_type, position=row.position, local_error=le,
                         observed_as=row.name if row.stands_for else None)
    words = _op_words(row)
    if hit.pinned is not None:  # the culprit is an op whose output the target never dumped
        p = hit.pinned
        first = FirstFailing(tensor=p.outputs[0] if p.outputs else _ref_name(row), op=p.name, op_type=p.op_type,
                             position=p.position, local_error=le)
        words = f"{p.name} ({p.op_type}, position {p.position}; its output was not dumped, first seen in {_ref_name(row)!r})"
        ev["pinned_by_pattern"] = p.name
    if kind == "input_not_copied":
        summary = (f"{words} reads the model input as zeros: its output is what it computes on an all-zero "
                   f"input{' (its bias per channel)' if pattern == 'bias_only' else ''} — the input was not copied "
                   f"(MNN online QNN needs shapeMutable=false).")
    else:
        allowed = (f"{th.quant_lsb_ok:g} quantization steps (it is off by {fmt.amount(le.max_err_lsb)})"
                   if le.max_err_lsb is not None else
                   f"≥ {fmt.db_unit(th.quant_local_ok_db)}" if fs.quantized else f"≥ {fmt.db_unit(local_limit_db(le, th))}")
        summary = (f"{words} is the first failing op: {fmt.local_inputs(le.inputs)} it gives "
                   f"SQNR {fmt.db_unit(le.sqnr_db)} where {'quantization' if fs.quantized else 'fp16'} allows {allowed}"
                   f"{'; ' + what if what else ''}.")
    return (Verdict(kind=kind, pattern=pattern, confidence=round(max(0.05, min(0.99, confidence)), 2),
                    summary=summary, evidence=ev), first)


def _pattern_words(pattern: str, best: Trial | None) -> str:
    if best is None:
        return ""
    return {
        "nan_inf": "it produces NaN/Inf",
        "zero_input": f"it behaves as if {best.variant}",
        "bias_only": f"its output is the bias alone ({best.variant})",
        "wrong_coordinates": f"the output is reproduced with {best.variant}",
        "wrong_semantics": f"the output is reproduced with {best.variant}",
        "permutation": f"the output is reproduced with {best.variant}",
        "scale_shift": f"{best.variant}",
        "constant": f"its output is constant ({best.variant})",
    }.get(pattern, best.variant)
