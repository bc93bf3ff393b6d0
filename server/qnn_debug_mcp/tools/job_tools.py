"""``job_status`` / ``job_result`` / ``job_cancel``: follow work that outlived its tool call."""

from __future__ import annotations

from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..args import JobId
from ..long_runs import publish_report
from ..models import JobInfo, JobOutcome
from ..tool_context import app_state, caller, relay, respond, tool

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
CANCELS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
CANCEL_GRACE_S = 10.0


def register(server: MCPServer) -> None:
    @tool(server, title="Status of a background job", annotations=READ_ONLY)
    async def job_status(job_id: JobId, ctx: Context) -> Annotated[CallToolResult, JobInfo]:
        """Check a background job started by baseline, dump_qnn, diagnose (or any long tool with
        background=true): its state (queued/running/succeeded/failed/cancelled), elapsed time and the
        latest progress events. Cheap; call it every 15-60 s while a job runs. Use job_result to get
        the output."""
        job = app_state(ctx).jobs.get(job_id, caller(ctx))
        info = job.info()
        last = info.recent_progress[-1].stage if info.recent_progress else "no progress yet"
        return respond(info, f"job {job.id} ({job.tool}) is {job.state} after {info.elapsed_s:.0f} s; last: {last}")

    @tool(server, title="Result of a background job", annotations=READ_ONLY)
    async def job_result(
        job_id: JobId,
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=100, description="Wait up to this many seconds for the job to "
                                       "finish (progress is forwarded meanwhile). 0 = answer at once.")] = 0,
    ) -> Annotated[CallToolResult, JobOutcome]:
        """Get the result of a background job: the same engine JSON the tool returns inline (for
        compare/diagnose: first_failing, verdict, rows, report). If the job is still running you get
        state=running and can call again; set wait_s (up to 100) to block for it instead of polling.
        A failed job returns its error message and hint."""
        jobs = app_state(ctx).jobs
        job = jobs.get(job_id, caller(ctx))
        if wait_s > 0 and not job.is_finished:
            await jobs.wait(job, wait_s, relay(ctx))
        report = publish_report(ctx, job.result, job.title) if job.result else None
        outcome = JobOutcome(job_id=job.id, tool=job.tool, state=job.state, result=job.result, error=job.error,
                             report_uri=report, next_step=job.info().next_step)
        summary = job.summary()
        detail = f": {job.error.message}" if job.error else (f": {summary}" if summary else "")
        return respond(outcome, f"job {job.id} ({job.tool}) {job.state}{detail}")

    @tool(server, title="Cancel a background job", annotations=CANCELS)
    async def job_cancel(job_id: JobId, ctx: Context) -> Annotated[CallToolResult, JobInfo]:
        """Stop a queued or running background job and kill its engine processes (simulator, adb,
        MNN). Partial output stays on disk but is not a valid run. Cancelling a finished job changes
        nothing."""
        jobs = app_state(ctx).jobs
        job = jobs.get(job_id, caller(ctx))
        if not job.is_finished:
            jobs.cancel(job)
            with anyio.move_on_after(CANCEL_GRACE_S):
                await job.done.wait()
        return respond(job.info(), f"job {job.id} ({job.tool}) is {job.state}")
