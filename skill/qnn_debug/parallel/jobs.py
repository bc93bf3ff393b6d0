"""What the parallel engine runs: jobs, the options that choose how, and the executor's one interface."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..progress import Progress

# below this many bytes of weights in the blocks, a serial run takes seconds and the engine's start-up would dominate
AUTO_MIN_BYTES = 256 << 20


@dataclass(frozen=True)
class Job:
    """One unit of work: ``fn`` ("package.module:function") called as ``fn(args)`` in a worker process, returning
    a JSON-able dict. ``key`` is stable across reruns (resume), ``label`` is what progress and errors name,
    ``memory`` the peak bytes the job may take (the scheduler never runs more at once than a node holds)."""

    key: str
    label: str
    fn: str
    args: dict[str, Any]
    memory: int
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ParallelOptions:
    """How to run the jobs: ``workers`` jobs at once at most on this machine (None: every core, or serial when the
    work is too small to pay for the engine's start-up), or ``cluster``: an existing Ray cluster's address."""

    workers: int | None = None
    cluster: str | None = None


class Executor(Protocol):
    """Runs jobs; results come back in the jobs' order. ``slots``: jobs that may run at once on one node."""

    name: str
    slots: int

    def run(self, jobs: list[Job], *, progress: Progress, stage: str, store: Path | None = None) -> list[dict[str, Any]]:
        ...


def machine_cores() -> int:
    """Cores this process may use (the CPU affinity mask; a container's limit)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
