"""Build the MCP server: tools, resources, prompts and the lifespan that owns background jobs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from qnn_debug.errors import BadInputError

from . import __version__, prompts, resources, tools
from .config import ServerConfig
from .errors import error_result
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


class QnnDebugServer(MCPServer[AppState]):
    """The SDK's server, except that arguments the input schema rejects get the same typed answer as any
    other bad input (``BadInputError: ... Next step: ...`` plus structured ``error``) instead of the SDK's
    raw ``Error executing tool`` validation dump."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[AppState, Any] | None = None) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            return error_result(schema_refusal(name, exc.__cause__))


def schema_refusal(tool: str, err: ValidationError) -> BadInputError:
    """What was wrong with each argument, by name and reason only: the rejected values are the caller's data."""
    problems = []
    for e in err.errors():
        where = ".".join(str(part) for part in e["loc"]) or "(arguments)"
        problems.append(f"{where}: {'missing (required)' if e['type'] == 'missing' else e['msg']}")
    return BadInputError(f"the arguments of {tool} do not match its input schema ({'; '.join(problems)})",
                         hint=f"give every required argument of {tool} with the type its input schema declares "
                              "(tools/list shows it) and call again",
                         details={"tool": tool, "fields": sorted({p.split(':')[0] for p in problems})})


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

    server = QnnDebugServer(
        "mnn-qnn-debug", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
        log_level="WARNING",
    )
    tools.register_all(server)
    resources.register(server)
    resources.register_reports(server, reports)
    prompts.register(server)
    return server
