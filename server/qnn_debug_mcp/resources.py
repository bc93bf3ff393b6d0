"""Resources: every playbook as ``playbook://<name>``; run reports appear via :mod:`.reports`."""

from __future__ import annotations

from collections.abc import Callable

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource

from .playbooks import NAME, first_heading, playbook_files


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


def _reader(name: str) -> Callable[[], str]:
    return lambda: _read(name)


def _read(name: str) -> str:
    files = playbook_files()
    path = files.get(name) if NAME.match(name) else None
    if path is None:
        known = ", ".join(sorted(files)) or "none installed"
        raise ResourceNotFoundError(f"no playbook named {name!r}; available: {known}")
    return path.read_text(encoding="utf-8", errors="replace")
