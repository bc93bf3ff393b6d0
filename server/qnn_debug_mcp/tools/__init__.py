"""Tool registration, one module per area. Each module exposes ``register(server)``."""

from __future__ import annotations

from mcp.server import MCPServer

from .analysis import register as register_analysis
from .device import register as register_device
from .fix import register as register_fix
from .job_tools import register as register_jobs
from .knowledge import register as register_knowledge
from .llm import register as register_llm
from .localise import register as register_localise


def register_all(server: MCPServer) -> None:
    """Register every tool; the order is the order of ``tools/list``: the workflow's own order."""
    for register in (register_knowledge, register_analysis, register_fix, register_localise, register_device, register_llm, register_jobs):
        register(server)
