"""One policy for every long tool: inline, background job, or "auto".

- ``background=False``: run in this call (progress forwarded; cancelling the call kills the child).
- ``background=True``: start a job and return its id at once.
- ``background=None`` (omitted): the tool's default. Tools whose work may exceed ~100 s on real models
  (baseline, dump_qnn, diagnose) default to a job, but wait ``--background-wait`` seconds first so a
  small model still answers in one call. If the caller cancels during that wait the job is
  cancelled too: nobody else knows its id.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult

from qnn_debug.errors import QnnDebugError

from .errors import engine_error, error_result, tool_error
from .jobs import Job, Work
from .models import JobState, LongToolAnswer
from .tool_context import app_state, caller, relay, respond

Summarize = Callable[[dict[str, Any]], str]
REPORT_PREFERENCE = (".md", ".html", ".json", ".png")


def report_files(result: dict[str, Any]) -> list[Path]:
    """Report files an engine result points at (compare's, or diagnose's nested ``report_files``), best first."""
    files: dict[str, Any] = dict(result.get("report_files") or {})
    nested = result.get("compare")
    if isinstance(nested, dict):
        files.update(nested.get("report_files") or {})
    paths = [Path(v) for v in files.values() if isinstance(v, str) and v and Path(v).is_file()]
    return sorted(paths, key=lambda p: REPORT_PREFERENCE.index(p.suffix) if p.suffix in REPORT_PREFERENCE else 99)


def publish_report(ctx: Context, result: dict[str, Any], title: str) -> str | None:
    """Publish every report file as a resource; return the URI of the main (Markdown) one."""
    owner = caller(ctx)
    uris = [app_state(ctx).reports.publish(path, f"{title} ({path.suffix[1:]})", owner)
            for path in report_files(result)]
    return uris[0] if uris else None


async def run_long(
    ctx: Context,
    *,
    tool: str,
    title: str,
    work: Work,
    background: bool | None,
    auto_background: bool,
    summarize: Summarize,
) -> CallToolResult:
    """Run ``work`` (an engine child; see :mod:`.engine_child`) according to the policy above and shape
    the answer. An engine error comes back as the tool's error answer, under its own class name."""
    state = app_state(ctx)
    as_job = background if background is not None else auto_background
    if not as_job:
        try:
            result = await work(relay(ctx))
        except QnnDebugError as e:
            return error_result(e)
        return _finished(ctx, tool, title, None, result, summarize)

    job = state.jobs.submit(tool, title, work, summarize=summarize, owner=caller(ctx))
    if background is True:
        return _pending(job)
    try:
        finished = await state.jobs.wait(job, state.config.background_wait_s, relay(ctx))
    except anyio.get_cancelled_exc_class():
        state.jobs.cancel(job)
        raise
    if not finished:
        return _pending(job)
    return outcome_or_error(ctx, job, summarize)


def outcome_or_error(ctx: Context, job: Job, summarize: Summarize) -> CallToolResult:
    """A finished job as this tool's answer; a failed one as the engine's error (its class name first),
    a cancelled one as a ToolError."""
    if job.state == "succeeded" and job.result is not None:
        return _finished(ctx, job.tool, job.title, job.id, job.result, summarize)
    if job.error is not None:
        e = job.error
        err = engine_error(e.type or "TargetError", e.kind, e.message, e.hint or "fix the input and start the tool again",
                           e.details)
        return error_result(err, prefix=f"{job.tool} failed (job {job.id}): ")
    raise tool_error(f"{job.tool} job {job.id} was cancelled", "start the tool again if the result is still needed")


def _finished(ctx: Context, tool: str, title: str, job_id: str | None, result: dict[str, Any],
              summarize: Summarize) -> CallToolResult:
    report_uri = publish_report(ctx, result, title)
    summary = summarize(result)
    step = f"open {report_uri} for the full report" if report_uri else "see `result` for details"
    answer: LongToolAnswer[Any] = LongToolAnswer(status="succeeded", job_id=job_id, summary=summary, result=result,
                            report_uri=report_uri, next_step=step)
    return respond(answer, f"{tool}: {summary}")


def _pending(job: Job) -> CallToolResult:
    state: JobState = job.state
    answer: LongToolAnswer[Any] = LongToolAnswer(
        status=state, job_id=job.id, summary=f"{job.title} is {state} as job {job.id}",
        next_step=f"call job_result with job_id={job.id} and wait_s up to 100 (or job_status for progress)",
    )
    return respond(answer, f"{job.tool}: started job {job.id} ({state}); follow it with job_status/job_result")
