"""The solved case a proven fix leaves for triage (``case-add``'s file and format)."""

from __future__ import annotations

from ..compare.schema import CompareResult
from ..errors import BadInputError
from ..triage.cases import CaseRecord, append_case
from .models import FixResult


def record_case(cases: str, result: CompareResult, fixed: FixResult) -> str | None:
    """Append the case (matched by the compare summary line naming the first failing op); None if already there."""
    ff = result.first_failing
    if ff is None:
        return None
    match = f"first failing: tensor {ff.tensor!r} from {ff.op} ({ff.op_type})"
    sites = "; ".join(f"{s.source} x 2^-{s.exponent} ({s.place})" for s in fixed.sites)
    record = CaseRecord(category="wrong_results_accuracy", match=match[:300],
                        cause=f"{result.verdict.kind} ({result.verdict.pattern}): {ff.tensor} leaves the fp16 range "
                        f"(HTP saturates at 131008)"[:600],
                        fix=f"exact power-of-two rescale: {sites}; proven: fp32 within 1 ulp, fp16 range clean on the "
                        f"sample and worst case, simulator ok"[:600],
                        source=(fixed.artefact or "")[:300])
    try:
        return append_case(cases, record).path
    except BadInputError as e:
        if "already has" in e.message:
            return None
        raise
