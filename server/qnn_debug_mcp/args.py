"""Arguments only the MCP face has (the rest come from the engine's request models): the job id, the
``background`` switch of long tools and the client's roots, which the server fills itself."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Resolve
from mcp.types import ListRootsResult
from pydantic import Field

from .tool_context import client_roots

JobId = Annotated[str, Field(min_length=1, max_length=64, description="Job id returned by a long tool.")]
Background = Annotated[bool | None, Field(
    default=None,
    description="true: return a job id at once and follow it with job_status/job_result; false: wait for the "
    "result in this call; omit for the tool's default.")]
ClientRoots = Annotated[ListRootsResult | None, Resolve(client_roots)]
"""Filled by the server (never by the model): the client's workspace roots, if it offers any."""
