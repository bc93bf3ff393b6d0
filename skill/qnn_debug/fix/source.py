"""The result a fix starts from: a compare JSON, a report folder or a diagnose folder, and its numbers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .. import fs
from ..compare.schema import CompareResult
from ..errors import BadInputError
from ..runstore import BASELINE_FILE, REFERENCE_DIR
from .models import Numbers

COMPARE_JSON = "compare.json"
REPORT_DIR = "report"  # diagnose's report folder (kept equal to ``qnn_debug.diagnose.REPORT_DIR``)


@dataclass
class Source:
    """A verdict to fix and where its runs are."""

    path: Path  # the compare JSON read
    result: CompareResult
    baseline: Path | None  # the baseline folder of the comparison (None: the reference was not a baseline)


def load_source(path: str) -> Source:
    """The comparison behind ``path``: a ``compare.json``, a report folder holding one, or a diagnose folder."""
    p = fs.check(path, what="result", kind="any")
    candidates = [p] if p.is_file() else [p / COMPARE_JSON, p / REPORT_DIR / COMPARE_JSON]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise BadInputError(f"{path} holds no comparison result ({' or '.join(str(c) for c in candidates)} missing)",
                            hint="pass a diagnose --out folder, its report/ folder, or a compare --json FILE")
    data = fs.read_json(found, what="comparison result")
    if isinstance(data, dict) and isinstance(data.get("compare"), dict):  # a saved `diagnose --json` document
        data = data["compare"]
    try:
        result = CompareResult.model_validate(data)
    except ValidationError as e:
        raise BadInputError(f"{found} is not a comparison result: {e.errors()[0]['msg']}",
                            hint="pass the JSON `qnn-debug compare --json FILE` or diagnose wrote") from None
    return Source(path=found, result=result, baseline=_baseline_of(result.reference))


def _baseline_of(reference: str) -> Path | None:
    p = Path(reference)
    for cand in (p, p.parent) if p.name == REFERENCE_DIR else (p,):
        if (cand / BASELINE_FILE).is_file():
            return cand
    return None


def numbers(result: CompareResult, outputs: list[str], tensor: str | None = None, report: str | None = None) -> Numbers:
    """The verdict and the SQNR at ``tensor`` (default: the first failing one) and at each model output."""
    rows = {r.stands_for or r.name: r for r in result.tensors}
    name = tensor or (result.first_failing.tensor if result.first_failing else None)
    row = rows.get(name) if name else None
    return Numbers(verdict=result.verdict.kind, pattern=result.verdict.pattern, tensor=name,
                   tensor_sqnr_db=row.metrics.get("sqnr_db") if row else None,
                   outputs_sqnr_db={o: rows[o].metrics.get("sqnr_db") if o in rows else None for o in outputs},
                   report=report)
