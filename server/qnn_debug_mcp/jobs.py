"""Background jobs: long engine runs that outlive the tool call that started them.

Hosts such as Claude Code move calls over ~120 s to the background and drop their progress, so work
that can take minutes (baseline, dump, diagnose on real models) runs as a job in the server's task
group. The call that starts it may wait a little and forward progress; after that the job keeps
its own progress log, and ``job_status`` / ``job_result`` / ``job_cancel`` follow it. Cancelling a
job (or shutting the server down) cancels its task, which kills the engine child's process group.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from qnn_debug.errors import QnnDebugError
from qnn_debug.process import AsyncProgress as ProgressCallback
from qnn_debug.progress import ProgressEvent

from .errors import compact_details, tool_error
from .models import ErrorInfo, JobInfo, JobState, ProgressLine

log = logging.getLogger(__name__)

Work = Callable[[ProgressCallback], Awaitable[dict[str, Any]]]
KEEP_FINISHED = 100
PROGRESS_KEPT = 500
FINISHED: tuple[JobState, ...] = ("succeeded", "failed", "cancelled")


@dataclass
class Job:
    """One engine run and everything a later call may want to know about it."""

    id: str
    tool: str
    title: str
    owner: str = "local"
    """Who started it (the MCP session); only that caller may see, follow or cancel it."""
    created: float = field(default_factory=time.monotonic)
    created_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    state: JobState = "queued"
    finished: float | None = None
    result: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    progress: deque[ProgressLine] = field(default_factory=lambda: deque(maxlen=PROGRESS_KEPT))
    progress_count: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    listeners: list[ProgressCallback] = field(default_factory=list)
    summarize: Callable[[dict[str, Any]], str] | None = None
    """The tool's one-line summary of its result (e.g. compare's verdict), for job_result's text."""

    def summary(self) -> str | None:
        if self.state != "succeeded" or self.result is None or self.summarize is None:
            return None
        try:
            return self.summarize(self.result)
        except Exception:  # a summary is a convenience; never let it hide the result
            log.exception("summary of job %s failed", self.id)
            return None

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED

    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.created

    async def record(self, event: ProgressEvent) -> None:
        """Keep the event in the job's log and pass it to whoever is waiting on the job right now."""
        self.progress_count += 1
        self.progress.append(ProgressLine(t=round(time.monotonic() - self.created, 3), stage=event.stage,
                                          done=event.done, total=event.total, message=event.message,
                                          finished=event.finished))
        for listener in list(self.listeners):
            try:
                await listener(event)
            except Exception:  # a caller that went away must not fail the job
                self.listeners.remove(listener)

    def info(self, recent: int = 10) -> JobInfo:
        return JobInfo(
            job_id=self.id, tool=self.tool, title=self.title, state=self.state, created_at=self.created_at,
            elapsed_s=round(self.elapsed(), 2), progress_events=self.progress_count,
            recent_progress=latest_per_stage(self.progress, recent), error=self.error,
            next_step=next_step(self),
        )


def latest_per_stage(progress: deque[ProgressLine], recent: int) -> list[ProgressLine]:
    """The newest event of each of the ``recent`` most recent stages, oldest first: a compare emits one
    event per tensor, and ten ticks of one stage tell a model less than where each step got to."""
    out: list[ProgressLine] = []
    seen: set[str] = set()
    for line in reversed(progress):
        if len(out) >= recent:
            break
        if line.stage not in seen:
            seen.add(line.stage)
            out.append(line)
    return out[::-1]


def next_step(job: Job) -> str:
    if job.state == "succeeded":
        return f"call job_result with job_id={job.id} to read the result"
    if job.state == "failed":
        return "read `error`; fix the input and start the tool again"
    if job.state == "cancelled":
        return "start the tool again if the result is still needed"
    return f"call job_status with job_id={job.id} in a little while (or job_cancel to stop it)"


class JobManager:
    """Starts jobs in the server's task group; at most ``max_running`` run at once, the rest queue."""

    def __init__(self, tg: TaskGroup, *, max_running: int = 2):
        self._tg = tg
        self._limiter = anyio.CapacityLimiter(max_running)
        self._jobs: OrderedDict[str, Job] = OrderedDict()

    def submit(self, tool: str, title: str, work: Work, summarize: Callable[[dict[str, Any]], str] | None = None,
               *, owner: str = "local") -> Job:
        job = Job(id=secrets.token_hex(12), tool=tool, title=title, summarize=summarize, owner=owner)
        self._jobs[job.id] = job
        self._evict()
        self._tg.start_soon(self._run, job, work, name=f"job {job.id} {tool}")
        return job

    def get(self, job_id: str, owner: str = "local") -> Job:
        """The caller's job; another session's job is answered exactly like a missing one."""
        job = self._jobs.get(job_id.strip())
        if job is None or job.owner != owner:
            mine = [j.id for j in self._jobs.values() if j.owner == owner][-5:]
            raise tool_error(f"no job with id {job_id[:64]!r} in this session (your recent jobs: {', '.join(mine) or 'none'})",
                             "use a job_id returned by baseline, dump_qnn, diagnose or another long tool")
        return job

    def cancel(self, job: Job) -> None:
        job.scope.cancel()

    async def wait(self, job: Job, timeout: float, listener: ProgressCallback | None = None) -> bool:
        """Wait up to ``timeout`` s for the job, forwarding its progress meanwhile; True when finished."""
        if listener is not None:
            job.listeners.append(listener)
        try:
            with anyio.move_on_after(timeout):
                await job.done.wait()
        finally:
            if listener is not None and listener in job.listeners:
                job.listeners.remove(listener)
        return job.is_finished

    async def _run(self, job: Job, work: Work) -> None:
        try:
            with job.scope:
                async with self._limiter:
                    job.state = "running"
                    await self._execute(job, work)
        finally:  # cancelled by job_cancel or by server shutdown: either way the job is over
            if not job.is_finished:
                job.state = "cancelled"
            job.finished = time.monotonic()
            job.done.set()

    @staticmethod
    async def _execute(job: Job, work: Work) -> None:
        try:
            job.result = await work(job.record)
            job.state = "succeeded"
        except QnnDebugError as e:
            job.state = "failed"
            job.error = ErrorInfo(type=type(e).__name__, kind=e.kind, message=e.message, hint=e.hint,
                                  details=compact_details(e.details) or None)
        except Exception as e:  # a bug: keep the details in the server log, tell the model plainly
            log.exception("job %s (%s) crashed", job.id, job.tool)
            job.state = "failed"
            job.error = ErrorInfo(kind="internal", message=f"internal error: {type(e).__name__}",
                                  hint="see the server's stderr log; report it as a bug")

    def _evict(self) -> None:
        finished = [j.id for j in self._jobs.values() if j.is_finished]
        for job_id in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._jobs[job_id]
