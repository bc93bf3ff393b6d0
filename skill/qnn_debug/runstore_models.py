"""Plain records of the run store that light result models need (pydantic only, no numpy).

:mod:`qnn_debug.runstore` re-exports them; they live here so a result schema can be loaded without
the run store's array code.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field


class InputInfo(BaseModel):
    """Where the input data came from and a hash of it, so two runs can be checked for the same input."""

    sha256: str
    source: str  # "npz:<path>", "random:seed=<n>", "testdir:<path>", ...
    names: list[str] = Field(default_factory=list)
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    note: str | None = None  # for generated data: the range it follows and what it cannot show


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
