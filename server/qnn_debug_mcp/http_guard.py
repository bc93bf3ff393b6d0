"""Streamable HTTP with the door locked: a bearer token, and Host/Origin checks against DNS rebinding.

Any local process (or a web page, through DNS rebinding) can reach a port on 127.0.0.1, so every HTTP
request must carry ``Authorization: Bearer <token>``: the operator's ``--token`` (or the
``QNN_DEBUG_MCP_TOKEN`` variable), otherwise one generated at start and printed to stderr. Requests
whose ``Host`` is not the address we serve, or whose ``Origin`` is not one we allow, are refused before
the MCP layer sees them (the SDK's own transport check runs as well).

Several tokens may be configured (``--token`` repeated), one per client: the token a request carries is
its identity (:func:`token_identity`, a hash, never the token), and jobs and report resources belong to
it — for sessionless requests it is the only identity there is, so two clients that must not see each
other's jobs need two tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .stdio_guard import MAX_LINE_BYTES, check_line

TOKEN_ENV = "QNN_DEBUG_MCP_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def bearer(headers: Mapping[str, str]) -> str | None:
    """The bearer token of a request's ``Authorization`` header, if any."""
    scheme, _, given = (headers.get("authorization") or "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" and given.strip() else None


def token_identity(headers: Mapping[str, str]) -> str | None:
    """Who a request is, by the token it carries: a short hash (tokens never appear in keys or logs)."""
    token = bearer(headers)
    return hashlib.sha256(token.encode()).hexdigest()[:24] if token else None


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    """``Host`` header values we answer: the bound address and, for a loopback bind, its other spellings."""
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = [bound, *LOOPBACK] if bound in (*LOOPBACK, "[::1]") else [bound]
    out = [f"{n}:{port}" for n in names] + list(extra)
    return list(dict.fromkeys(out))


def allowed_origins(hosts: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    return list(dict.fromkeys([f"http://{h}" for h in hosts] + list(extra)))


class HttpGuard:
    """ASGI middleware: Host, Origin and bearer-token checks on every HTTP request."""

    def __init__(self, app: ASGIApp, *, token: str | Iterable[str], hosts: Iterable[str], origins: Iterable[str]):
        self.app = app
        self._tokens = [t.encode() for t in ([token] if isinstance(token, str) else token)]
        self._hosts = set(hosts)
        self._origins = set(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem = self._check(headers)
        if problem is not None:
            status, message, extra = problem
            response = JSONResponse({"error": message}, status_code=status, headers=extra)
            await response(scope, receive, send)
            return
        if scope.get("method") == "POST":
            body = await _read_body(receive, MAX_LINE_BYTES + 1)
            reply = check_line(body)
            if reply:  # a message the SDK would refuse with id null (or not at all): our error names its id
                await Response(reply, status_code=400, media_type="application/json")(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _check(self, headers: Headers) -> tuple[int, str, dict[str, str]] | None:
        if headers.get("host", "") not in self._hosts:
            return 421, "Host header not allowed (DNS rebinding protection)", {}
        origin = headers.get("origin")
        if origin is not None and origin not in self._origins:
            return 403, "Origin not allowed", {}
        given = (bearer(headers) or "").encode()
        if not any(hmac.compare_digest(given, t) for t in self._tokens):
            return 401, "missing or wrong bearer token (see the server's stderr or --token)", {
                "WWW-Authenticate": 'Bearer realm="qnn-debug-mcp"'}
        return None


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body (at most ``limit`` bytes are kept; check_line refuses a longer one)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        if size < limit:
            chunks.append(chunk[: limit - size])
        size += len(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body already read, then whatever the client sends next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
