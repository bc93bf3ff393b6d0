"""Worker module of the serial executor: every job of the list in this one process, in order, each result kept
in the store as it finishes (the worker protocol of :mod:`qnn_debug.workers`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..errors import error_from_dict
from ..progress import Progress, eta
from .jobs import Job
from .runner import run_job
from .store import open_store


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    jobs = [Job(**{**j, "after": tuple(j.get("after") or ())}) for j in request["jobs"]]  # in a topological order
    store = open_store(Path(request["store"]) if request.get("store") else None)
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    started = time.monotonic()
    with progress.stage(request["stage"], total=len(jobs), message=f"{request['stage']}: {len(jobs)} jobs, one at a "
                        "time") as advance:
        for i, job in enumerate(jobs):
            kept = store.get(job) if store is not None else None
            if kept is None:
                out = run_job(job.fn, job.args, job.env)
                if "error" in out:
                    raise error_from_dict(out["error"])
                kept = out["result"]
                if store is not None:
                    store.put(job, kept)
            results[i] = kept
            advance(message=eta(f"{job.label} done", i + 1, len(jobs), started))
    return {"results": results}
