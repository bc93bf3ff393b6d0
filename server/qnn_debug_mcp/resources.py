"""Resources: every playbook as ``playbook://<name>``, and the run reports of :mod:`.reports` as ``report://<id>``."""

from __future__ import annotations

import re
from collections.abc import Callable

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource

from .playbooks import NAME, first_heading, playbook_files
from .reports import REPORT_SCHEME, ReportRegistry, read
from .tool_context import caller


def register(server: MCPServer) -> None:
    for name, path in playbook_files().items():
        server.add_resource(FunctionResource(
            uri=f"playbook://{name}", name=f"playbook-{name}", title=first_heading(path),
            description=f"Debugging playbook: {first_heading(path)}", mime_type="text/markdown",
            fn=_reader(name),
        ))

    @server.resource("playbook://{name}", name="playbook", title="Debugging playbook by name",
                     description="A debugging playbook (Markdown). Start with playbook://README for the index.",
                     mime_type="text/markdown")
    def playbook(name: str) -> str:
        return _read(name)


def register_reports(server: MCPServer, registry: ReportRegistry) -> None:
    """``report://{report_id}``: one template whose reader checks the caller owns the report."""

    @server.resource(f"{REPORT_SCHEME}://{{report_id}}", name="report", title="Run report",
                     description="A compare/diagnose report (the report_uri a tool returned); only its own session can read it.",
                     mime_type="text/markdown")
    def report(report_id: str, ctx: Context) -> str | bytes:
        return read(registry.get(report_id, caller(ctx)))


def _reader(name: str) -> Callable[[], str]:
    return lambda: _read(name)


_LINK = re.compile(r"\]\(([A-Za-z0-9][A-Za-z0-9._-]*)\.md(#[^)\s]*)?\)")


def _read(name: str) -> str:
    files = playbook_files()
    path = files.get(name) if NAME.match(name) else None
    if path is None:
        known = ", ".join(sorted(files)) or "none installed"
        raise ResourceNotFoundError(f"no playbook named {name!r}; available: {known}")
    return link_resources(path.read_text(encoding="utf-8", errors="replace"), set(files))


def link_resources(text: str, names: set[str]) -> str:
    """Point the playbooks' relative links (``[x](error-codes.md#...)``) at their resources
    (``playbook://error-codes#...``): a client reading a resource has no folder to resolve ``.md`` paths in."""
    def swap(m: re.Match[str]) -> str:
        stem, anchor = m.group(1), m.group(2) or ""
        return f"](playbook://{stem}{anchor})" if stem in names else m.group(0)

    return _LINK.sub(swap, text)
