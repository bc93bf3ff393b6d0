"""Build the MCP server: tools, resources, prompts and the lifespan that owns background jobs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server import MCPServer

from . import __version__, prompts, resources, tools
from . import reports as report_resources
from .config import ServerConfig
from .jobs import JobManager
from .reports import ReportRegistry
from .state import AppState

INSTRUCTIONS = """\
Debug Alibaba MNN models on Qualcomm QNN (HTP/NPU) the way an NPU engineer would.
Workflow: triage_log (if there is an error log) -> baseline (trusted CPU fp32 reference) -> dump_qnn (every
QNN tensor in one run) -> compare (first failing op + verdict: real bug vs fp16/quantization error) ->
lookup_op_constraints for the failing op -> propose a fix -> re-run. diagnose does baseline+dump+compare in
one call. Long tools return a job id: follow it with job_status / job_result. File paths must be inside the
workspace roots. Playbooks are resources: playbook://README lists them."""


def build_server(config: ServerConfig | None = None) -> MCPServer[AppState]:
    """A fully registered server; nothing heavy is imported until a tool runs."""
    cfg = config or ServerConfig()
    reports = ReportRegistry()

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppState]) -> AsyncIterator[AppState]:
        async with anyio.create_task_group() as tg:
            try:
                yield AppState(config=cfg, jobs=JobManager(tg, max_running=cfg.max_running_jobs), reports=reports)
            finally:
                tg.cancel_scope.cancel()  # shutting down: cancel jobs, which kills their engine children

    server: MCPServer[AppState] = MCPServer(
        "mnn-qnn-debug", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
        log_level="WARNING",
    )
    tools.register_all(server)
    resources.register(server)
    report_resources.register(server, reports)
    prompts.register(server)
    return server
