"""What ``diagnose`` returns (pydantic only; :mod:`qnn_debug.diagnose` re-exports it)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .compare.schema import CompareResult
from .localise.models import FallbackReport


class DiagnoseResult(BaseModel):
    out: str
    baseline: str
    target_run: str
    report_dir: str
    baseline_trusted: bool | None = None
    baseline_sentence: str | None = None
    inputs_note: str | None = None  # generated inputs: the range they follow and what they cannot show
    compare: CompareResult | None = None  # None when bisection produced the verdict (see ``fallback.bisect``)
    timings: dict[str, float] = Field(default_factory=dict)
    method: str = "full_dump"  # full_dump | chunked_dump | bisect: what produced the verdict
    fallback: FallbackReport | None = None  # why the full dump was not used, and what was done instead
    warnings: list[str] = Field(default_factory=list)  # what the preparation step changed (e.g. a folded input)
