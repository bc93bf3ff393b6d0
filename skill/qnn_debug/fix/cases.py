"""The solved case a proven fix leaves for triage (``case-add``'s file and format)."""

from __future__ import annotations

from ..compare.schema import CompareResult
from ..errors import BadInputError
from ..triage.cases import CaseRecord, append_case
from .models import FixResult


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def _words(result: CompareResult, fixed: FixResult, tensor: str) -> tuple[str, str]:
    """(cause, fix) of the case, in the fix kind's own terms, with the numbers that proved it."""
    verdict = f"{result.verdict.kind} ({result.verdict.pattern})"
    b, a = fixed.before, fixed.after
    numbers = (f"; SQNR at {tensor} {_db(b.tensor_sqnr_db)} -> {_db(a.tensor_sqnr_db)}" if b is not None and a is not None
               else "")
    if fixed.kind == "fp16_rescale":
        sites = "; ".join(f"{s.source} x 2^-{s.exponent} ({s.place})" for s in fixed.sites)
        return (f"{verdict}: {tensor} leaves the fp16 range (HTP saturates at 131008)",
                f"exact power-of-two rescale: {sites}; proven: fp32 within 1 ulp, fp16 range clean on the sample and "
                f"the worst case, simulator without the range finding{numbers}")
    if fixed.kind == "encoding":
        return (f"{verdict}: the encoding of {tensor} clips the reference range",
                f"encoding recomputed from the reference range ({fixed.artefact}); proven on the simulator{numbers}")
    return f"{verdict} at {tensor}", fixed.summary


def record_case(cases: str, result: CompareResult, fixed: FixResult) -> str | None:
    """Append the case (matched by the compare summary line naming the first failing op); None if already there."""
    ff = result.first_failing
    if ff is None:
        return None
    match = f"first failing: tensor {ff.tensor!r} from {ff.op} ({ff.op_type})"
    cause, fix = _words(result, fixed, ff.tensor)
    record = CaseRecord(category="wrong_results_accuracy", match=match[:300], cause=cause[:600], fix=fix[:600],
                        source=(fixed.artefact or "")[:300])
    try:
        return append_case(cases, record).path
    except BadInputError as e:
        if "already has" in e.message:
            return None
        raise
