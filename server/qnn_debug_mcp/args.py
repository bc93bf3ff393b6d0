"""Argument types shared by the tools: limits and descriptions live here, once.

Every string has a length cap so a huge argument is rejected by validation (a ToolError naming the
field) before any work starts.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Resolve
from mcp.types import ListRootsResult
from pydantic import Field

from .tool_context import client_roots

PathArg = Annotated[str, Field(min_length=1, max_length=4096,
                               description="Path inside the workspace (relative paths start at the first root).")]
OutPath = Annotated[str | None, Field(default=None, max_length=4096,
                                      description="Output directory inside the workspace (new or empty); omit for a "
                                      "fresh one under qnn-debug-runs/.")]
InputsPath = Annotated[str | None, Field(default=None, max_length=4096,
                                         description="Inputs inside the workspace: an .npz keyed by input name (e.g. a "
                                         "baseline's inputs.npz, so every run sees the same data); omit for seeded "
                                         "random data.")]
InputsOrTestDir = Annotated[str | None, Field(default=None, max_length=4096,
                                              description="Inputs inside the workspace: an .npz keyed by input name "
                                              "(e.g. a baseline's inputs.npz, so every run sees the same data) or an "
                                              "MNN test dir (input.json + <input>.txt, e.g. the one a phone run used); "
                                              "omit for seeded random data.")]
JobId = Annotated[str, Field(min_length=1, max_length=64, description="Job id returned by a long tool.")]
Background = Annotated[bool | None, Field(
    default=None,
    description="true: return a job id at once and follow it with job_status/job_result; false: wait for the "
    "result in this call; omit for the tool's default.")]
ClientRoots = Annotated[ListRootsResult | None, Resolve(client_roots)]
"""Filled by the server (never by the model): the client's workspace roots, if it offers any."""
