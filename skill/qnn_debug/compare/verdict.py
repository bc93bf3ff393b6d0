"""The verdict stage: from the findings of a comparison to kind, pattern, confidence, evidence and first failing op.

Only decisions and numbers live here; :mod:`.wording` has the sentences and next steps, and :mod:`.rules` binds
each decision below to its sentence and steps as one rule object, in this order (the registry holds the order; a
new rule is one object registered there). Never from end-to-end error or cosine alone — cosine recovers with
depth while the error stays:
1. the target's copy of a graph input is all zeros → ``input_not_copied`` (MNN ``shapeMutable=true``), the
   first failing op being the first op that reads that input; its first observation (a backend copy) differs
   otherwise → ``input_not_copied`` with moderate confidence: other baseline data or an uncopied input, and
   no downstream op can be blamed since the error starts before any op;
2. a device encoding that clips the data (quantized targets) or the first op leaving the fp16 range, when no
   confirmed wrong op comes before it → ``quantization``/``encoding_range`` or ``precision``/``fp16_range``;
3. the first suspect (a jump beyond the floor) whose *local* error is large is a wrong op →
   ``real_bug``, or ``input_not_copied`` when it reads a graph input and behaves as if it were zeros;
4. otherwise a quantized target → ``quantization``; a target clearly worse than the floor (or with
   suspects that are fine locally) → ``precision``; else ``ok``. "Clearly worse" is judged where the
   application reads the run: a graph output beyond the floor by ``excess_ok_db``, a graph output whose
   top-1 (argmax) differs, or any tensor failing its own floor criterion (``bad``: ``jump_db`` beyond it).
   Intermediate tensors a few dB further (fp16 rounding accumulated along a decoder, a LUT Sigmoid) with
   healthy outputs are ``ok``, with the worst tensor in the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..runstore import Run
from .criterion import SQNR
from .drift import find_drift
from .fusion import name_target_op
from .localise import Located, OpNode, Suspect, downstream_ops
from .overflow import Overflow
from .quant_detect import RangeClip
from .rail import Harmless
from .schema import FirstFailing, Pattern, TensorRow, VerdictKind
from .stage_types import Finding, InputMismatch, Measured, PatternFindings, Rerun
from .thresholds import OUTPUT_OK_DB, Thresholds
from .top1 import Top1

MAX_TRIALS_IN_EVIDENCE = 10
__all__ = ["Context", "Decision", "Finding", "Findings", "InputMismatch", "bug", "checked", "claims_absence",
           "context", "degraded_outputs", "discount_uncompared", "encoding_range", "end_to_end", "finish_ops",
           "floor_fails", "fp16_range", "healthy", "input_mismatch", "mark_first_failing", "name_on_target",
           "note_unchecked", "ops_evidence", "poor_floor", "poor_floor_outputs", "precision", "quantization",
           "ref_name", "top1_misses", "unconfirmed_bug", "undecided", "unresolved", "zero_input"]

@dataclass
class Findings:
    """Everything the earlier stages found: the verdict's whole input."""

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
    top1: dict[str, Top1] = field(default_factory=dict)  # graph output -> argmax agreement with the reference
    rail: list[Harmless] = field(default_factory=list)  # tensors at the fp16 rail that nothing downstream feels
    ops: list[OpNode] = field(default_factory=list)  # the graph in execution order (what blame may follow)

    def every_row(self) -> list[TensorRow]:
        return self.all_rows or list(self.rows.values())

    @classmethod
    def gather(cls, measured: Measured, located: Located, rerun: Rerun, patterns: PatternFindings, *,
               outputs: list[str], observer_effect_db: dict[str, float] | None, has_floor: bool,
               top1: dict[str, Top1] | None = None) -> Findings:
        """The verdict's input, from the outputs of the metrics, localise, local re-run and patterns stages."""
        return cls(rows=measured.rows, findings=rerun.findings, quantized=measured.quantized, outputs=outputs,
                   zero_inputs=list(measured.zero_inputs), zero_observations=measured.zero_inputs,
                   input_consumers=located.consumers, input_mismatches=measured.input_mismatches,
                   uncompared=measured.uncompared, local_unavailable=located.local_note,
                   observer_effect_db=observer_effect_db, has_floor=has_floor, all_rows=measured.all_rows,
                   overflow=patterns.overflow, range_clip=patterns.range_clip,
                   quantized_by=measured.detection.sources, top1=top1 or {}, rail=patterns.rail,
                   ops=located.ops)


@dataclass
class Decision:
    """What the verdict stage returns: the verdict without its words, and what it rests on."""

    kind: VerdictKind
    pattern: Pattern
    confidence: float
    evidence: dict[str, Any]
    first: FirstFailing | None
    rule: str  # the name of the rule that decided (:mod:`.rules`): its sentence and next steps are its own
    hit: Finding | None = None  # the finding a bug verdict rests on
    worst: TensorRow | None = None  # the row furthest beyond the floor


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(float(x), nd)


def ref_name(row: TensorRow) -> str:
    """The reference tensor a row compares against (its own name unless it is an alias row)."""
    return row.stands_for or row.name


def _row_evidence(row: TensorRow) -> dict[str, Any]:
    m, f = row.metrics, row.floor_metrics or {}
    seen = {"observed_as": row.name} if row.stands_for else {}
    return {"tensor": ref_name(row), **seen, "op": row.op, "op_type": row.op_type, "position": row.position,
            "target_sqnr_db": _r(SQNR.value(m)), "floor_sqnr_db": _r(SQNR.value(f)),
            "target_diff_rate": m.get("diff_rate"), "floor_diff_rate": f.get("diff_rate"),
            "cosine": m.get("cosine"), "excess_db": _r(row.excess_db), "jump_db": _r(row.jump_db)}


def end_to_end(found: Findings) -> dict[str, Any]:
    """The graph outputs as the application reads them: SQNR, diff rate, cosine and the floor's SQNR."""
    out = {}
    direct = {r.name: r for r in found.every_row() if r.stands_for is None}
    for name in found.outputs:
        row = direct.get(name) or found.rows.get(name)  # the output as the application reads it
        if row is not None:
            out[name] = {"sqnr_db": _r(SQNR.value(row.metrics)), "diff_rate": row.metrics.get("diff_rate"),
                         "cosine": row.metrics.get("cosine"),
                         "floor_sqnr_db": _r(SQNR.value(row.floor_metrics))}
            top = found.top1.get(name)
            if top is not None:
                out[name]["top1_agree"] = top.agree
                out[name]["top1_positions"] = top.positions
    return out


def _worst(found: Findings) -> TensorRow | None:
    judged = [r for r in found.every_row() if r.excess_db is not None]
    return max(judged, key=lambda r: r.excess_db or 0.0) if judged else None


def _confirmed(found: Findings) -> Finding | None:
    for f in found.findings:
        if f.local is not None and f.local.ok is False:
            return f
    return None


def checked(found: Findings) -> list[Finding]:
    """Suspects whose re-run gave an answer (ok or not)."""
    return [f for f in found.findings if f.local is not None and f.local.ok is not None]


def unresolved(found: Findings) -> list[Finding]:
    """Suspects that could not be re-run."""
    return [f for f in found.findings if f.local is None or f.local.ok is None]


@dataclass
class Context:
    """What every verdict rule reads besides the findings: the evidence all verdicts carry, the tensor furthest
    beyond the floor and the first suspect whose local re-run says it is wrong."""

    base: dict[str, Any]  # end to end, the floor note, the observer effect, the worst excess
    worst: TensorRow | None
    hit: Finding | None
    quantized_by: list[str]

    def evidence(self) -> dict[str, Any]:
        """The shared evidence past the input checks: with what says the target is quantized."""
        return {**self.base, "quantized_by": self.quantized_by} if self.quantized_by else dict(self.base)


def context(found: Findings, th: Thresholds) -> Context:
    """The rules' shared input, computed once per comparison."""
    base: dict[str, Any] = {"end_to_end": end_to_end(found)}
    if not found.has_floor:
        base["floor"] = f"none: tensors judged against {th.floor_cap_db:g} dB SQNR"
    if found.observer_effect_db:
        base["observer_effect_db"] = found.observer_effect_db
    if found.rail:
        base["rail_harmless"] = [h.evidence() for h in found.rail[:10]]
    worst = _worst(found)
    if worst is not None:
        base["worst_excess"] = {"tensor": worst.name, "excess_db": _r(worst.excess_db)}
    return Context(base, worst, _confirmed(found), list(found.quantized_by))


def finish_ops(decision: Decision, found: Findings, th: Thresholds, ctx: Context) -> Decision:
    """What a verdict about the ops also carries: the worst tensor, the drift note (float targets), and the
    discount for tensors that could not be compared."""
    decision.worst = ctx.worst
    if not found.quantized:
        drift = find_drift(list(found.rows.values()), th)
        if drift is not None:
            decision.evidence["drift"] = drift
    return discount_uncompared(decision, found)


def name_on_target(decision: Decision, target: Run, ops: list[OpNode], seen: Iterable[str]) -> Decision:
    """The first failing op as the target ran it: its own fused op when it covers several model nodes."""
    if decision.first is not None:
        decision.first = name_target_op(decision.first, target, ops, seen)
        if decision.first.fused is not None:
            decision.evidence["fused_op"] = decision.first.fused.model_dump()
    return decision


def mark_first_failing(decision: Decision, rows: Iterable[TensorRow], th: Thresholds) -> Decision:
    """The tensor table agrees with the verdict: the first failing tensor's rows read ``bad``.

    When the floor fails the same way (an fp16 overflow clips the floor too) the tensor is no worse than its
    floor, so its own judgement says ``ok`` with no excess; its excess is then measured from the fp16 level
    (``floor_cap_db``), what a correct fp16 run reaches."""
    if decision.first is None or decision.kind == "ok":
        return decision
    for row in rows:
        if ref_name(row) != decision.first.tensor or row.status == "bad":
            continue
        sqnr = SQNR.value(row.metrics)
        if sqnr is not None:
            row.excess_db = round(max(row.excess_db or 0.0, SQNR.excess(sqnr, th.floor_cap_db)), 2)
        row.status = "bad"
    return decision


def note_unchecked(decision: Decision, suspects: list[Suspect], rerun: int) -> Decision:
    """Suspects beyond the re-run budget, listed so nobody mistakes them for cleared."""
    if len(suspects) > rerun:
        decision.evidence["unchecked_suspects"] = [
            {"tensor": s.tensor, "op": s.op.name, "jump_db": round(s.jump_db, 1)} for s in suspects[rerun:][:5]]
    return decision


def _range_clip(found: Findings, base: dict[str, Any], hit: Finding | None) -> Decision:
    """A device encoding narrower than the data: quantization, located at that tensor (not a wrong op: the
    target is the reference clipped at the encoding's range)."""
    c = found.range_clip
    assert c is not None
    row = c.row
    ev: dict[str, Any] = {**base, **_row_evidence(row), "encoding_range": c.evidence()}
    if hit is not None:
        ev["downstream_suspect"] = {"tensor": hit.suspect.tensor, "op": hit.suspect.op.name,
                                    "note": "its error follows from the clipped encoding upstream"}
    first = FirstFailing(tensor=ref_name(row), op=row.op, op_type=row.op_type, position=row.position,
                         observed_as=row.name if row.stands_for else None)
    return Decision("quantization", "encoding_range", 0.85, ev, first, "encoding_range")


def _overflow(found: Findings, base: dict[str, Any], hit: Finding | None) -> Decision:
    """The model is not fp16-safe: the first op leaving the fp16 range is where the run goes wrong, whatever
    its local re-run says (an fp32 re-run of an op whose result fp16 cannot hold always disagrees)."""
    o = found.overflow
    assert o is not None
    ev: dict[str, Any] = {**base, "fp16_range": o.evidence()}
    if o.row is not None:
        ev.update(_row_evidence(o.row))
    if hit is not None and hit.suspect.op.name in downstream_ops(found.ops, o.op):
        ev["downstream_suspect"] = {"tensor": hit.suspect.tensor, "op": hit.suspect.op.name,
                                    "local_sqnr_db": _r(hit.local.sqnr_db if hit.local else None),
                                    "note": "its error follows from the overflow upstream"}
    first = FirstFailing(tensor=o.tensor, op=o.op.name, op_type=o.op.op_type, position=o.op.position,
                         observed_as=o.row.name if o.row is not None and o.row.stands_for else None,
                         local_error=hit.local if hit is not None and hit.suspect.op.name == o.op.name else None)
    if o.inner is not None:  # the target's own stage of that op leaves the range first: name it, and the model node
        first.op, first.op_type, first.target_tensor = o.inner.op, o.inner.op_type, o.inner.tensor
        first.model_op, first.model_op_type = o.op.name, o.op.op_type
    return Decision("precision", "fp16_range", 0.9 if o.row is not None else 0.6, ev, first, "fp16_range")


def floor_fails(decision: Decision) -> float | None:
    """The worst graph output's fp16-floor SQNR when it is below the acceptable level (no fp16 engine can run
    the model as is), else None."""
    outs = decision.evidence.get("end_to_end") or {}
    floors = [v.get("floor_sqnr_db") for v in outs.values() if v.get("floor_sqnr_db") is not None]
    return min(floors) if floors and min(floors) < OUTPUT_OK_DB else None


def discount_uncompared(decision: Decision, found: Findings) -> Decision:
    """A verdict that could not see some tensors the model produces must not claim to have checked them all
    (a verdict that found a fault stands: what it found does not depend on the unseen tensors)."""
    if not found.uncompared:
        return decision
    decision.evidence["not_compared"] = found.uncompared[:10]
    if claims_absence(decision):  # claims of absence: they rest on every tensor
        decision.confidence = round(min(decision.confidence, 0.5), 2)
    return decision


def claims_absence(decision: Decision) -> bool:
    """Verdicts that say "no wrong op": they rest on every tensor having been seen."""
    return decision.kind in ("ok", "precision", "quantization")


# --- the rules' decisions: each returns None when its case does not hold (see :mod:`.rules` for the order) ---

def zero_input(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    return _zero_input(found, ctx.base) if found.zero_inputs else None


def input_mismatch(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    return _input_mismatch(found, ctx.base) if found.input_mismatches else None


def encoding_range(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    """A clipping encoding, unless a confirmed wrong op comes before it."""
    clip, hit = found.range_clip, ctx.hit
    if clip is None or (hit is not None and hit.suspect.op.position < clip.row.position):
        return None
    return _range_clip(found, ctx.evidence(), hit)


def fp16_range(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    """The first op leaving the fp16 range, unless a confirmed wrong op comes before it or does not depend on it
    (an error is inherited only along the data flow: a wrong op the overflow cannot reach is a fault of its own)."""
    over, hit = found.overflow, ctx.hit
    if over is None or (hit is not None and hit.suspect.op.position < over.op.position):
        return None
    if hit is not None and found.ops and hit.suspect.op.name not in downstream_ops(found.ops, over.op):
        return None
    return _overflow(found, ctx.evidence(), hit)


def bug(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    if ctx.hit is None:
        return None
    d = _bug(found, ctx.hit, ctx.evidence())
    o = found.overflow
    if o is not None:  # a range finding the wrong op does not depend on: a second problem, kept in view
        d.evidence["also_fp16_range"] = {"op": o.op.name, "tensor": o.tensor, "reference_max_abs": round(o.ref_max, 1),
                                         "note": "not fp16-safe there too, on a path the wrong op does not read"}
    return d


def ops_evidence(found: Findings, ctx: Context) -> dict[str, Any]:
    """The evidence of a verdict on the ops with no confirmed wrong op: the suspects and what their re-runs said."""
    ev = {**ctx.evidence(), "suspects_checked": [
        {**_row_evidence(found.rows[f.suspect.tensor]), "local_sqnr_db": _r(f.local.sqnr_db if f.local else None),
         "local_ok": f.local.ok if f.local else None, "local_max_err_lsb": f.local.max_err_lsb if f.local else None}
        for f in found.findings[:5]]}
    if found.local_unavailable:
        ev["local_error"] = found.local_unavailable
    return ev


def unconfirmed_bug(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    """No way to re-run the op: a huge jump is still most likely a bug, but say how sure we are."""
    open_ = unresolved(found)
    if not open_:
        return None
    s0 = open_[0].suspect
    first = found.rows[s0.tensor]
    if not ((SQNR.value(first.metrics) or 0.0) < SQNR.broken_below and s0.jump_db >= 2 * th.jump_db):
        return None
    return Decision("real_bug", "none", 0.45, {**ops_evidence(found, ctx), **_row_evidence(first)},
                    FirstFailing(tensor=ref_name(first), op=first.op, op_type=first.op_type,
                                 position=first.position, observed_as=first.name if first.stands_for else None),
                    "unconfirmed_bug", hit=open_[0])


def quantization(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    if not found.quantized:
        return None
    done = checked(found)
    return Decision("quantization", "none", 0.85 if done else 0.7,
                    {**ops_evidence(found, ctx), "checked_ops": len(done)}, None, "quantization")


def undecided(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    """A tensor beyond the fixed fp16 level with no floor run and no op re-run: nothing measured tells fp16
    precision from a wrong op (an MNN-only baseline of a real fused-ReLU bug read 4.1 dB and was called
    ``precision``), so the verdict says what is missing instead of guessing. Suspects re-run and fine locally
    are evidence, so those stay ``precision``."""
    if found.has_floor or checked(found) or not (_degraded(found, th, ctx.worst) or found.findings):
        return None
    missing = ["fp16_floor", "local_rerun"]
    ev: dict[str, Any] = {**ops_evidence(found, ctx), "missing": missing}
    first = None
    open_ = unresolved(found)
    if open_:  # where the error starts: the place to look once the missing runs are there
        row = found.rows[open_[0].suspect.tensor]
        ev.update(_row_evidence(row))
        first = FirstFailing(tensor=ref_name(row), op=row.op, op_type=row.op_type, position=row.position,
                             observed_as=row.name if row.stands_for else None)
    return Decision("undecided", "none", 0.3, ev, first, "undecided", hit=open_[0] if open_ else None)


def precision(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    """Clearly worse than the floor, or suspects that are fine locally: precision, no wrong op."""
    if not (_degraded(found, th, ctx.worst) or found.findings):
        return None
    return Decision("precision", "none", 0.55 if unresolved(found) else 0.75, ops_evidence(found, ctx), None,
                    "precision")


def poor_floor(found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
    poor = poor_floor_outputs(found, th)
    if not poor:
        return None
    return Decision("precision", "none", 0.7, {**ops_evidence(found, ctx), "poor_floor_outputs": dict(poor)}, None,
                    "poor_floor")


def healthy(found: Findings, th: Thresholds, ctx: Context) -> Decision:
    return Decision("ok", "none", 0.9 if found.rows else 0.3, ops_evidence(found, ctx), None, "ok")


def degraded_outputs(found: Findings, th: Thresholds) -> list[TensorRow]:
    """Graph outputs (as the application reads them) beyond the floor by ``excess_ok_db`` or more."""
    direct = {r.name: r for r in found.every_row() if r.stands_for is None}
    rows = [direct.get(n) or found.rows.get(n) for n in found.outputs]
    return [r for r in rows if r is not None and (r.excess_db or 0.0) >= th.excess_ok_db]


def top1_misses(found: Findings) -> dict[str, Top1]:
    """Graph outputs whose argmax differs from the reference's at some position."""
    return {n: t for n, t in found.top1.items() if t.agree < t.positions}


def _degraded(found: Findings, th: Thresholds, worst: TensorRow | None) -> bool:
    """Worse than an fp16 run should be: judged at the outputs when they were compared, else at the worst tensor."""
    if worst is None or (worst.excess_db or 0.0) < th.excess_ok_db:
        return bool(top1_misses(found))
    direct = {r.name for r in found.every_row() if r.stands_for is None} | set(found.rows)
    if not any(n in direct for n in found.outputs):
        return True  # no output to judge by: the worst tensor decides, as it always did
    return bool(degraded_outputs(found, th) or top1_misses(found) or any(r.status == "bad" for r in found.every_row()))


def poor_floor_outputs(found: Findings, th: Thresholds) -> list[tuple[str, float]]:
    """Graph outputs whose fp16-floor SQNR is below the acceptable level while the target is no better (a target
    that beats a broken floor, e.g. HTP holding values up to 131008 that the floor clips at 65504, is fine)."""
    out = []
    for name, v in end_to_end(found).items():
        db, own = v.get("floor_sqnr_db"), v.get("sqnr_db")
        if db is not None and db < th.output_ok_db and (own is None or own < th.output_ok_db):
            out.append((name, float(db)))
    return out


def _zero_input(found: Findings, base: dict[str, Any]) -> Decision:
    """The input never reached the target: the first op reading it is where the run goes wrong."""
    name = found.zero_inputs[0]
    consumer = found.input_consumers.get(name)
    ev: dict[str, Any] = {**base, "input": name, "first_consumer": consumer.name if consumer else None,
                          "zero_observations": found.zero_observations.get(name, [name]),
                          "detail": "the target's copy of this graph input is all zeros while the reference input is not"}
    ev, first = _at_consumer(found, name, ev)
    return Decision("input_not_copied", "zero_input", 0.95, ev, first, "zero_input")


def _input_mismatch(found: Findings, base: dict[str, Any]) -> Decision:
    """The error starts at a graph input, before any op: either the baseline used other data or the input
    was not copied into the QNN graph; nothing in the comparison tells the two apart, so say both."""
    m = found.input_mismatches[0]
    consumer = found.input_consumers.get(m.name)
    ev: dict[str, Any] = {**base, "input": m.name, "first_consumer": consumer.name if consumer else None,
                          "input_mismatch": {"input": m.name, "observed_as": m.observed_as, "sqnr_db": _r(m.sqnr_db),
                                             "constant": m.constant, "nonfinite": m.nonfinite},
                          "detail": "the target's first copy of this graph input differs from the reference input"}
    if len(found.input_mismatches) > 1:
        ev["other_inputs"] = [o.name for o in found.input_mismatches[1:]]
    ev, first = _at_consumer(found, m.name, ev)
    return Decision("input_not_copied", "constant" if m.constant is not None else "none", 0.6, ev, first,
                    "input_mismatch")


def _at_consumer(found: Findings, name: str, ev: dict[str, Any]) -> tuple[dict[str, Any], FirstFailing]:
    """First failing = the first op reading graph input ``name`` (with its numbers), else the input itself."""
    consumer = found.input_consumers.get(name)
    first = FirstFailing(tensor=name, op=None, op_type=None, position=-1)
    if consumer is not None:
        out = consumer.outputs[0] if consumer.outputs else name
        row = found.rows.get(out)
        if row is not None:  # its numbers, as for any first failing op (the input itself is in "input")
            ev = {**ev, **_row_evidence(row)}
        first = FirstFailing(tensor=out, op=consumer.name, op_type=consumer.op_type, position=consumer.position,
                             observed_as=row.name if row is not None and row.stands_for else None)
    return ev, first


def _bug(found: Findings, hit: Finding, base: dict[str, Any]) -> Decision:
    s = hit.suspect
    row = found.rows[s.tensor]
    le = hit.local
    assert le is not None
    pattern: Pattern = hit.best.pattern if hit.best is not None else "none"  # type: ignore[assignment]
    kind: VerdictKind = ("input_not_copied" if pattern in ("zero_input", "bias_only") and hit.reads_graph_input
                         else "real_bug")
    if kind == "input_not_copied":
        pattern = "zero_input"  # the input is what is missing; "bias only" is how it shows (in the evidence)
    confidence = 0.6
    if le.sqnr_db is not None and le.sqnr_db < SQNR.broken_below:
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
    others = [f.suspect for f in found.findings if f is not hit and f.local is not None and f.local.ok is False]
    if others:
        ev["later_suspects"] = [{"tensor": o.tensor, "op": o.op.name, "jump_db": _r(o.jump_db)} for o in others[:5]]
    first = FirstFailing(tensor=ref_name(row), op=row.op, op_type=row.op_type, position=row.position, local_error=le,
                         observed_as=row.name if row.stands_for else None)
    if hit.pinned is not None:  # the culprit is an op whose output the target never dumped
        p = hit.pinned
        first = FirstFailing(tensor=p.outputs[0] if p.outputs else ref_name(row), op=p.name, op_type=p.op_type,
                             position=p.position, local_error=le)
        ev["pinned_by_pattern"] = p.name
    return Decision(kind, pattern, round(max(0.05, min(0.99, confidence)), 2), ev, first, "bug", hit=hit)
