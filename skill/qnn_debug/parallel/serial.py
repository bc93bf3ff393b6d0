"""The jobs one after another in one child process (``--workers 1``, and small models where the engine's
start-up would cost more than it saves): what every simulator run did before the engine."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..progress import Progress
from .jobs import Job, check_order

WORKER = "qnn_debug.parallel.worker"


class SerialExecutor:
    name = "serial"
    slots = 1

    def __init__(self, *, timeout: float, log_dir: Path | None = None):
        self.timeout, self.log_dir = timeout, log_dir

    def run(self, jobs: list[Job], *, progress: Progress, stage: str, store: Path | None = None) -> list[dict[str, Any]]:
        from ..workers import run_worker

        if not jobs:
            return []
        check_order(jobs)  # the child runs them in list order
        log = self.log_dir / f"{stage.replace(' ', '_').replace(':', '')}_worker.log" if self.log_dir else None
        answer = run_worker(WORKER, {"jobs": [asdict(j) for j in jobs], "stage": stage,
                                     "store": str(store) if store else None},
                            log_path=log, timeout=self.timeout, progress=progress, what=f"{stage} ({len(jobs)} jobs)")
        results: list[dict[str, Any]] = answer["results"]
        json.dumps(results)  # JSON-able by contract: the Ray path ships them the same way
        return results
