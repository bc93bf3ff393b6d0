"""The write-back loop: a ``cases`` file of solved problems that the next triage reads first.

Why: MNN's own qnn-debug skill grows by writing each solved case back into its reference. Here the
assistant (or the user) appends one short JSON line per solved problem — a literal line of the log that
identified it, the category, cause and fix — with ``qnn-debug case-add``; ``qnn-debug triage`` then
shows matching past cases before anything else. The file is the user's, in their workspace: it is read
with a size limit, bad lines become warnings (never a traceback), and appending rewrites the file
atomically with its previous content kept (``<file>.previous``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from .. import fs
from ..errors import BadInputError
from .signatures import CATEGORIES

DEFAULT_NAME = "qnn-debug-cases.jsonl"
MAX_FILE_BYTES = 2 << 20
MAX_RECORDS = 2000
CASE_BOOST = 3.0


class CaseRecord(BaseModel):
    """One solved problem. ``match`` is a literal piece of the log (case-insensitive) that identified it."""

    date: str = Field(default_factory=lambda: dt.date.today().isoformat(), pattern=r"^\d{4}-\d{2}-\d{2}$")
    category: str
    match: str = Field(min_length=6, max_length=300)
    cause: str = Field(min_length=3, max_length=600)
    fix: str = Field(min_length=3, max_length=600)
    source: str = Field(default="", max_length=300, description="issue URL, commit or run that confirmed it")

    @field_validator("category")
    @classmethod
    def _known_category(cls, v: str) -> str:
        if v not in CATEGORIES:
            raise ValueError(f"unknown category {v!r}; use one of: {', '.join(CATEGORIES)}")
        return v

    @field_validator("match")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v or not v.strip():
            raise ValueError("match must be one non-empty log line (or a literal part of one)")
        return v.strip()


class KnownCase(BaseModel):
    """A past case whose ``match`` text occurs in this log."""

    date: str
    category: str
    cause: str
    fix: str
    source: str
    match: str
    line: int = Field(description="first log line containing the match")


class CaseFile(BaseModel):
    path: str
    records: list[CaseRecord]
    warnings: list[str] = Field(default_factory=list)


def read_cases(path: str | os.PathLike[str]) -> CaseFile:
    """Parse a cases file (confined to the allowed roots); unreadable lines become warnings."""
    if not Path(path).exists():
        raise BadInputError(f"cases file {path} does not exist",
                            hint="create it with `qnn-debug case-add`, or leave --cases out")
    real = fs.check(path, what="cases file", kind="file")
    text = fs.read_text(real, what="cases file", max_bytes=MAX_FILE_BYTES, errors="replace")
    records: list[CaseRecord] = []
    warnings: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(records) >= MAX_RECORDS:
            warnings.append(f"{real.name}: more than {MAX_RECORDS} cases; the rest were not read")
            break
        try:
            records.append(CaseRecord.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError, TypeError) as e:
            reason = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
            warnings.append(f"{real.name} line {n} ignored: {reason[:160]}")
    return CaseFile(path=str(real), records=records, warnings=warnings)


def append_case(path: str | os.PathLike[str], record: CaseRecord) -> CaseFile:
    """Append ``record`` to the cases file (created if absent), atomically; the previous file is kept."""
    p = Path(path)
    if not p.parent.is_dir():
        raise BadInputError(f"folder {p.parent} does not exist", hint="create it first or choose another --cases path")
    old = ""
    if p.exists() or p.is_symlink():
        current = read_cases(p)
        if any(r.match == record.match and r.category == record.category for r in current.records):
            raise BadInputError(f"{p.name} already has a {record.category} case matching {record.match!r}",
                                hint="update that line instead of adding a duplicate")
        old = fs.read_text(current.path, what="cases file", max_bytes=MAX_FILE_BYTES, errors="replace")
        if old and not old.endswith("\n"):
            old += "\n"
    body = old + json.dumps(record.model_dump(), ensure_ascii=False) + "\n"
    if len(body.encode("utf-8")) > MAX_FILE_BYTES:
        raise BadInputError(f"cases file {p} would exceed {MAX_FILE_BYTES} bytes", hint="start a new cases file")
    if old:
        fs.atomic_write_text(p.with_name(p.name + ".previous"), old, what="previous cases file")
    fs.atomic_write_text(p, body, what="cases file")
    return read_cases(p)


class CaseMatcher:
    """Finds the records' ``match`` strings in streamed log text (case-insensitive, first line kept)."""

    def __init__(self, records: list[CaseRecord]):
        self.records = records
        self._needles = [r.match.lower() for r in records]
        self.first_line: dict[int, int] = {}

    def feed(self, text: str, base_line: int) -> None:
        if not self.records:
            return
        low = text.lower()
        for i, needle in enumerate(self._needles):
            if i in self.first_line:
                continue
            pos = low.find(needle)
            if pos >= 0:
                self.first_line[i] = base_line + low.count("\n", 0, pos) + 1

    def hits(self) -> list[KnownCase]:
        out = [KnownCase(date=r.date, category=r.category, cause=r.cause, fix=r.fix, source=r.source, match=r.match,
                         line=self.first_line[i])
               for i, r in enumerate(self.records) if i in self.first_line]
        return sorted(out, key=lambda k: k.date, reverse=True)
