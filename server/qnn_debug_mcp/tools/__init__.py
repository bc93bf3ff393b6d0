"""Tool registration, one module per area. Each module exposes ``register(server)``."""

from __future__ import annotations

from mcp.server import MCPServer

from . import analysis, device, job_tools, knowledge


def register_all(server: MCPServer) -> None:
    for module in (knowledge, analysis, device, job_tools):
        module.register(server)
