"""Run reports written by compare/diagnose, published as MCP resources (``report://<id>``).

A report appears in ``resources/list`` as soon as a tool has produced it, so a client can open the
full table a tool summarised. Only files a tool of *this* server wrote are published.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Callable
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.resources import FunctionResource

REPORT_SCHEME = "report"


class ReportRegistry:
    """Maps short report ids to report files and registers each once as a resource."""

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}

    def publish(self, server: MCPServer, path: Path, title: str) -> str:
        """Register ``path`` (once) and return its resource URI."""
        report_id = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        uri = f"{REPORT_SCHEME}://{report_id}"
        if report_id not in self._paths:
            self._paths[report_id] = path
            mime = _mime(path)
            server.add_resource(FunctionResource(
                uri=uri, name=f"report-{report_id}", title=title, mime_type=mime,
                description=f"{title} ({path.name})", fn=_reader(path, mime),
            ))
        return uri


def _mime(path: Path) -> str:
    if path.suffix == ".md":
        return "text/markdown"
    return mimetypes.guess_type(path.name)[0] or "text/plain"


def _reader(path: Path, mime: str) -> Callable[[], str | bytes]:
    textual = mime.startswith("text/") or mime == "application/json"

    def read() -> str | bytes:
        return path.read_text(encoding="utf-8", errors="replace") if textual else path.read_bytes()

    return read
