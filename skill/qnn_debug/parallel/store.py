"""Finished jobs' results on disk, so a run that stopped (a worker lost twice, a cancel) resumes where it was.

A result is kept under the job's key with a fingerprint of everything the job reads (its function and
arguments: the call site puts digests of the values and models it reads into them); a rerun reuses a result
only when the fingerprint is the same, so a changed model or input is never answered from an older run, and
only while the files the job wrote (``"files"`` of its result) still exist: jobs after it read them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..runstore import atomic_write_text
from .jobs import Job


def fingerprint(job: Job) -> str:
    doc = json.dumps({"fn": job.fn, "args": job.args}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()


class JobStore:
    """``<dir>/<key>.json``: ``{"fingerprint": ..., "result": ...}``, written atomically as each job finishes."""

    def __init__(self, path: Path):
        self.path = path

    def _file(self, job: Job) -> Path:
        return self.path / f"{job.key}.json"

    def get(self, job: Job) -> dict[str, Any] | None:
        try:
            doc = json.loads(self._file(job).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(doc, dict) or doc.get("fingerprint") != fingerprint(job) or not isinstance(doc.get("result"), dict):
            return None
        result: dict[str, Any] = doc["result"]
        if not all(Path(f).is_file() for f in result.get("files") or []):
            return None  # what it wrote is gone: run it again (its dependants read those files)
        return result

    def put(self, job: Job, result: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self._file(job), json.dumps({"fingerprint": fingerprint(job), "result": result}))


def open_store(path: Path | None) -> JobStore | None:
    return JobStore(path) if path is not None else None
