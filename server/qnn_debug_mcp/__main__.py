"""``qnn-debug-mcp``: start the MCP server (stdio by default, ``--http`` for streamable HTTP).

argparse rather than typer on purpose: every millisecond here is paid before ``tools/list`` answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from . import __version__

DEFAULT_PORT = 8765


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="qnn-debug-mcp", description="MCP server for debugging MNN's QNN (HTP/NPU) backend.")
    p.add_argument("--root", action="append", type=Path, default=[], metavar="DIR",
                   help="Workspace root: every file a tool reads or writes stays inside (repeatable; default: current "
                   "directory). A client's own roots can only narrow these, never widen them.")
    p.add_argument("--exec-root", action="append", type=Path, default=[], metavar="DIR",
                   help="Folder that executables and native libraries named in target options (MNN build dir, "
                   "MNN2QNNModel, QNN SDK) may come from (repeatable; default: the --root folders in stdio mode, "
                   "none in HTTP mode).")
    p.add_argument("--http", action="store_true", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1, local only).")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}).")
    p.add_argument("--token", action="append", default=[], metavar="TOKEN",
                   help="HTTP bearer token clients must send (repeatable: one per client; jobs and reports belong to "
                   "the token that made them; default: $QNN_DEBUG_MCP_TOKEN, else a new one printed to stderr).")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="Extra Origin allowed to call over HTTP, e.g. http://localhost:6274 for a browser client (repeatable).")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST:PORT",
                   help="Extra Host header value accepted over HTTP (repeatable; for a non-loopback bind).")
    p.add_argument("--adb", default=None, metavar="PATH", help="adb executable to use for devices (default: adb on PATH).")
    p.add_argument("--background-wait", type=float, default=20.0, metavar="S",
                   help="How long baseline/dump_qnn/diagnose wait before answering with a job id (default 20).")
    p.add_argument("--device-timeout", type=float, default=30.0, metavar="S",
                   help="Limit for one adb query by list_devices/probe_device (default 30).")
    p.add_argument("--call-timeout", type=float, default=60.0, metavar="S",
                   help="Per-call limit of quick tools (triage_log, lookup_op_constraints, toggle_shapeMutable, "
                   "check_llm_export, adb queries); their work is killed, never left running (default 60).")
    p.add_argument("--stall-timeout", type=float, default=600.0, metavar="S",
                   help="Stop an engine run or job that used no CPU and printed nothing for this long: blocked on "
                   "I/O (default 600; the overall engine limit stays 3600).")
    p.add_argument("--version", action="version", version=f"qnn-debug-mcp {__version__}")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    roots = [r.expanduser() for r in args.root] or [Path.cwd()]
    exec_roots = [r.expanduser() for r in args.exec_root]
    missing = [str(r) for r in [*roots, *exec_roots] if not r.is_dir()]
    if missing:
        sys.stderr.write(f"qnn-debug-mcp: --root/--exec-root is not a directory: {', '.join(missing)}\n")
        sys.exit(2)

    from .app import build_server
    from .config import ServerConfig

    config = ServerConfig(roots=[r.resolve() for r in roots], exec_roots=[r.resolve() for r in exec_roots],
                          http=args.http, adb=args.adb, background_wait_s=max(0.0, args.background_wait),
                          device_timeout_s=max(1.0, args.device_timeout),
                          quick_timeout_s=max(1.0, args.call_timeout), stall_timeout_s=max(1.0, args.stall_timeout))
    server = build_server(config)
    try:
        if args.http:
            serve_http(server, args)
        else:
            from .stdio_guard import guarded_stdio

            with guarded_stdio():  # malformed JSON-RPC gets an error reply instead of silence
                server.run()
    except KeyboardInterrupt:
        pass


def serve_http(server: Any, args: argparse.Namespace) -> None:
    """Streamable HTTP behind the bearer-token and Host/Origin guard (see :mod:`.http_guard`)."""
    import os

    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from .http_guard import TOKEN_ENV, HttpGuard, allowed_hosts, allowed_origins, new_token

    tokens: list[str] = list(args.token) or ([os.environ[TOKEN_ENV]] if os.environ.get(TOKEN_ENV) else [])
    if not tokens:
        tokens = [new_token()]
        sys.stderr.write(f"qnn-debug-mcp: HTTP bearer token (send 'Authorization: Bearer <token>'): {tokens[0]}\n")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.stderr.write(f"qnn-debug-mcp: serving on {args.host}: anyone who can reach it and has the token can run tools\n")
    hosts = allowed_hosts(args.host, args.port, args.allow_host)
    origins = allowed_origins(hosts, args.allow_origin)
    security = TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)
    app = server.streamable_http_app(transport_security=security, host=args.host)
    guarded = HttpGuard(app, token=tokens, hosts=hosts, origins=origins)
    config = uvicorn.Config(guarded, host=args.host, port=args.port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)


if __name__ == "__main__":
    main()
