"""Whether the reference a comparison stands on passed the baseline's MNN CPU gate, said before the verdict.

A comparison against a reference that two fp32 implementations do not confirm (the gate failed, or was
switched off) can blame the target for the reference's own error. The comparison still runs — the user may
have a reason — but the result says so first: ``reference_trusted: false``, the baseline's own sentence at
the head of the summary, and (through the summary) at the head of the report and of the MCP answer.
"""

from __future__ import annotations

from pydantic import ValidationError

from .. import fs
from ..baseline_models import BaselineReport
from ..errors import BadInputError
from ..runstore import BASELINE_FILE
from .importers import ReferenceSide
from .schema import CompareResult

UNTRUSTED_HEAD = "REFERENCE NOT TRUSTED"


def reference_trust(side: ReferenceSide) -> tuple[bool | None, str | None]:
    """(trusted, the baseline's sentence); (None, None) when the reference is a run outside any baseline."""
    if side.baseline_dir is None or not (side.baseline_dir / BASELINE_FILE).is_file():
        return None, None
    file = side.baseline_dir / BASELINE_FILE
    try:
        report = BaselineReport.model_validate(fs.read_json(file, what="baseline report"))
    except ValidationError as e:
        raise BadInputError(f"{file} is unreadable: {e.errors()[0]['msg']}", hint="re-run `qnn-debug baseline`") from None
    return report.trusted, report.sentence


def mark_trust(result: CompareResult, side: ReferenceSide) -> CompareResult:
    """Record whether the reference is trusted; an untrusted one is named first in the summary."""
    trusted, sentence = reference_trust(side)
    result.reference_trusted, result.reference_note = trusted, sentence
    if trusted is False:
        result.verdict.summary = _preamble(sentence) + result.verdict.summary
    return result


def verdict_alone(result: CompareResult) -> str:
    """The summary without the distrust preamble, for a caller that ran the comparison with the gate off on
    purpose and has proven the reference another way (``fix`` checks fp32 equivalence to the original)."""
    head = _preamble(result.reference_note) if result.reference_trusted is False else ""
    summary = result.verdict.summary
    return summary[len(head):] if head and summary.startswith(head) else summary


def _preamble(sentence: str | None) -> str:
    said = sentence or "Not trusted."  # "Not trusted: ..." / "Not verified: ..." from the baseline
    return (f"Reference {said[:1].lower()}{said[1:]} The verdict that follows may be the reference's error rather "
            f"than the target's. ")
