"""Helpers shared by the MCP server tests (no tests here).

Kept as functions, not fixtures, so each test module states what it uses. The models are real:
``qnn_debug.examples.small_cnn`` saved as ONNX, run by the real engine in child processes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from qnn_debug_mcp.app import build_server
from qnn_debug_mcp.config import ServerConfig

MODES = ["auto", "legacy"]
REPO = Path(__file__).resolve().parents[1]


def write_small_cnn(folder: Path, name: str = "small_cnn.onnx") -> Path:
    """The project's own 4-node conv net as a real .onnx file."""
    import onnx

    from qnn_debug.examples import small_cnn

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save(small_cnn(), str(path))
    return path


@asynccontextmanager
async def connect(root: Path, mode: str, **config: Any) -> AsyncIterator[Client]:
    """An in-process client for a fresh server confined to ``root``."""
    server = build_server(ServerConfig(roots=[root], **config))
    async with Client(server, mode=mode) as client:
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call (fails the test with the error text otherwise)."""
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, text
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, f"expected an error, got {result.structured_content}"
    return " ".join(getattr(c, "text", "") for c in result.content)


def stdio_params(root: Path, *extra: str, unbuffered: bool = True) -> StdioServerParameters:
    """Launch the real console entry point over stdio, as a host would (minimal environment)."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", str(root))}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    if os.environ.get("PYTHONPATH"):  # a checkout run from source (not installed) serves its own code
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return StdioServerParameters(command=sys.executable, args=["-m", "qnn_debug_mcp", "--root", str(root), *extra],
                                 env=env, cwd=str(root))


def json_lines(raw: bytes) -> list[Any]:
    """Parse every line of a stdio capture; a non-JSON line fails the test."""
    out = []
    for line in raw.decode("utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out
