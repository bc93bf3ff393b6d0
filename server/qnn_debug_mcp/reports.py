"""Run reports written by compare/diagnose, readable as MCP resources (``report://<id>``, registered by
:func:`.resources.register_reports`).

Each report belongs to the session whose tool call produced it: ``report://{report_id}`` is one
resource template whose reader checks the caller, so another session (HTTP mode) can neither list nor
read it. Ids are random, and the file is read through the engine's confined opener (a regular file,
no symlink swapped in). Only files a tool of *this* server wrote are published.
"""

from __future__ import annotations

import mimetypes
import secrets
from dataclasses import dataclass
from pathlib import Path

from mcp.server.mcpserver.exceptions import ResourceNotFoundError

REPORT_SCHEME = "report"
MAX_REPORT_BYTES = 64 << 20


@dataclass(frozen=True)
class Report:
    path: Path
    owner: str
    title: str
    mime: str


class ReportRegistry:
    """Maps random report ids to (owner, file)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Report] = {}
        self._ids: dict[tuple[str, Path], str] = {}

    def publish(self, path: Path, title: str, owner: str) -> str:
        """Register ``path`` for ``owner`` (once) and return its resource URI."""
        key = (owner, path)
        report_id = self._ids.get(key)
        if report_id is None:
            report_id = secrets.token_hex(12)
            self._ids[key] = report_id
            self._by_id[report_id] = Report(path=path, owner=owner, title=title, mime=_mime(path))
        return f"{REPORT_SCHEME}://{report_id}"

    def get(self, report_id: str, owner: str) -> Report:
        report = self._by_id.get(report_id)
        if report is None or report.owner != owner:
            raise ResourceNotFoundError(f"no report {report_id[:64]!r} in this session")
        return report


def read(report: Report) -> str | bytes:
    from qnn_debug import fs
    from qnn_debug.errors import QnnDebugError

    try:
        data = fs.read_bytes(report.path, what="report", max_bytes=MAX_REPORT_BYTES)
    except QnnDebugError as e:
        raise ResourceNotFoundError(e.message) from None
    textual = report.mime.startswith("text/") or report.mime == "application/json"
    return data.decode("utf-8", errors="replace") if textual else data


def _mime(path: Path) -> str:
    if path.suffix == ".md":
        return "text/markdown"
    return mimetypes.guess_type(path.name)[0] or "text/plain"
