"""Helpers every tool uses: reach the app state and the caller, the workspace, output folders, the answer."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, ListRoots
from mcp.types import CallToolResult, ListRootsRequest, ListRootsResult, TextContent, ToolAnnotations
from pydantic import BaseModel

from .errors import tool_error
from .outputs import new_run_dir
from .progress import ProgressRelay
from .state import AppState
from .workspace import Workspace, intersect_roots, roots_from_uris

log = logging.getLogger(__name__)
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
ROOTS_TIMEOUT_S = 5.0
INPUT_REQUIRED_VERSION = "2026-07-28"  # protocol versions are ISO dates, so they compare as strings


def tool(server: MCPServer, *, title: str, annotations: ToolAnnotations) -> Callable[[F], F]:
    """``server.tool`` with the docstring dedented into the description a model reads."""

    def decorate(fn: F) -> F:
        return server.tool(title=title, annotations=annotations, description=inspect.cleandoc(fn.__doc__ or ""))(fn)

    return decorate


def app_state(ctx: Context) -> AppState:
    return cast(AppState, ctx.request_context.lifespan_context)


def caller(ctx: Context) -> str:
    """Who is calling, for job and report ownership. Over HTTP: the bearer token's identity (a hash; each
    ``--token`` is one client) plus the HTTP session (``Mcp-Session-Id``, which the server issued and only
    that client knows) when there is one — so sessionless requests (the 2026-07-28 era) are kept apart by
    their token, and a session id is useless with another token. "local" for stdio and in-process clients
    (one client per server)."""
    try:
        headers = ctx.headers
    except Exception:  # no request context: an in-process call
        headers = None
    if headers is None:
        return "local"
    from .http_guard import token_identity

    who = f"token:{token_identity(headers) or 'none'}"
    session = headers.get("mcp-session-id")
    return f"{who}/session:{session}" if session else who


async def client_roots(ctx: Context) -> ListRoots | ListRootsResult | None:
    """Resolver for a tool's ``roots`` parameter: the client's workspace roots, if it offers any.

    On 2026-07-28 connections the SDK asks for them inside the call (``ListRoots`` marker); on
    handshake-era connections we ask directly, with a time limit, and treat a failure as "none".
    """
    caps = ctx.client_capabilities
    if caps is None or caps.roots is None:
        return None
    version = ctx.protocol_version
    if version is not None and version >= INPUT_REQUIRED_VERSION:
        return ListRoots()
    try:
        with anyio.fail_after(ROOTS_TIMEOUT_S):
            return await ctx.session.send_request(ListRootsRequest(), ListRootsResult)
    except Exception as e:  # the client said it has roots but could not list them: fall back
        log.info("roots/list failed (%s); using the server's --root directories", e)
        return None


def workspace(ctx: Context, roots: ListRootsResult | None) -> Workspace:
    """The server's ``--root`` directories, narrowed to the client's roots when it lists any.

    A client can narrow the workspace, never widen it: its roots are intersected with the operator's.
    """
    operator = app_state(ctx).config.roots
    if roots is None or not roots.roots:
        return Workspace(operator)
    offered = roots_from_uris(str(r.uri) for r in roots.roots)
    kept = intersect_roots(offered, operator)
    if not kept:
        raise tool_error("none of the client's workspace roots lies inside the server's --root directories "
                         f"({', '.join(str(r) for r in operator)})",
                         "open a folder inside those directories, or restart the server with --root for your folder")
    return Workspace(kept)


def exec_workspace(ctx: Context) -> Workspace | None:
    """Where executables and native libraries named in options may come from: operator-configured
    folders only (``--exec-root``; in stdio mode the ``--root`` folders too), never a client's roots."""
    cfg = app_state(ctx).config
    if cfg.exec_roots:
        return Workspace(cfg.exec_roots)
    return None if cfg.http else Workspace(cfg.roots)


def child_roots(ctx: Context, ws: Workspace) -> list[Path]:
    """The folders an engine child is confined to: the call's workspace plus the operator's exec folders
    (the engine re-checks every file it opens against them)."""
    roots = list(ws.roots)
    exec_ws = exec_workspace(ctx)
    if exec_ws is not None:
        roots += [r for r in exec_ws.roots if not ws.contains(r)]
    return roots


def new_output(ctx: Context, ws: Workspace, raw: str | None, *, group: str, leaf: str, what: str = "out") -> Path:
    """A fresh, confined run directory for this call (never one another call was given)."""
    return new_run_dir(ws, raw, claimed=app_state(ctx).claimed_outputs, group=group, leaf=leaf, what=what)


def relay(ctx: Context) -> ProgressRelay:
    return ProgressRelay(ctx.report_progress)


def respond(model: BaseModel, summary: str) -> CallToolResult:
    """Structured content for programs plus a short summary (and the JSON) for models that read text."""
    data = model.model_dump(mode="json", by_alias=True)
    return CallToolResult(
        content=[TextContent(type="text", text=summary), TextContent(type="text", text=json.dumps(data, indent=1))],
        structured_content=data,
    )
