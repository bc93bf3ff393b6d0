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
    ``memory`` the peak bytes the job may take (the scheduler never runs more at once than a node holds).
    ``after``: keys of jobs that must finish first (their data goes through files, whose paths a job that writes
    any lists under ``"files"`` of its result, so a result kept for resume counts only while they exist)."""

    key: str
    label: str
    fn: str
    args: dict[str, Any]
    memory: int
    env: dict[str, str] = field(default_factory=dict)
    after: tuple[str, ...] = ()


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


def check_order(jobs: list[Job]) -> None:
    """Every job's ``after`` names a job listed before it (a topological order); else a typed error."""
    from ..errors import BadInputError

    seen: set[str] = set()
    keys = {j.key for j in jobs}
    for job in jobs:
        late = [k for k in job.after if k not in seen]
        if late:
            where = "later in the list" if late[0] in keys else "not in the list"
            raise BadInputError(f"job {job.label!r} must run after {late[0]!r}, which is {where}",
                                hint="list the jobs so that each comes after the jobs it depends on",
                                details={"job": job.key, "after": late[0]})
        seen.add(job.key)


def schedule(jobs: list[Job], todo: list[int]) -> list[int]:
    """The order to submit ``todo`` (indices into ``jobs``) in. Without dependencies: the largest jobs first
    (memory stands for work: both grow with a job's weights), so the run does not end on one worker with a big job
    left. With them: by readiness (the length of the longest chain of jobs before it), and among jobs ready
    together those with the longest chain after them first, so the critical path is never starved."""
    if not any(j.after for j in jobs):
        return sorted(todo, key=lambda i: -jobs[i].memory)
    index = {j.key: i for i, j in enumerate(jobs)}
    depth = [0] * len(jobs)
    for i, job in enumerate(jobs):  # a topological list (check_order)
        depth[i] = max((depth[index[k]] + 1 for k in job.after if k in index), default=0)
    tail = [0] * len(jobs)
    for i in reversed(range(len(jobs))):
        for k in jobs[i].after:
            if k in index:
                tail[index[k]] = max(tail[index[k]], tail[i] + 1)
    return sorted(todo, key=lambda i: (depth[i], -tail[i], -jobs[i].memory, i))


def machine_cores() -> int:
    """Cores this process may use (the CPU affinity mask; a container's limit)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
