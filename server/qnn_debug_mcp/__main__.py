"""``qnn-debug-mcp``: start the MCP server (stdio by default, ``--http`` for streamable HTTP).

argparse rather than typer on purpose: every millisecond here is paid before ``tools/list`` answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__

DEFAULT_PORT = 8765


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="qnn-debug-mcp", description="MCP server for debugging MNN's QNN (HTP/NPU) backend.")
    p.add_argument("--root", action="append", type=Path, default=[], metavar="DIR",
                   help="Workspace root for file arguments when the client offers no roots (repeatable; default: current directory).")
    p.add_argument("--http", action="store_true", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1, local only).")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}).")
    p.add_argument("--adb", default=None, metavar="PATH", help="adb executable to use for devices (default: adb on PATH).")
    p.add_argument("--background-wait", type=float, default=20.0, metavar="S",
                   help="How long baseline/dump_qnn/diagnose wait before answering with a job id (default 20).")
    p.add_argument("--device-timeout", type=float, default=30.0, metavar="S",
                   help="Limit for one adb query by list_devices/probe_device (default 30).")
    p.add_argument("--version", action="version", version=f"qnn-debug-mcp {__version__}")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    roots = [r.expanduser() for r in args.root] or [Path.cwd()]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        sys.stderr.write(f"qnn-debug-mcp: --root is not a directory: {', '.join(missing)}\n")
        sys.exit(2)

    from .app import build_server
    from .config import ServerConfig

    config = ServerConfig(roots=[r.resolve() for r in roots], adb=args.adb, background_wait_s=max(0.0, args.background_wait),
                          device_timeout_s=max(1.0, args.device_timeout))
    server = build_server(config)
    try:
        if args.http:
            if args.host not in ("127.0.0.1", "localhost", "::1"):
                sys.stderr.write(f"qnn-debug-mcp: serving on {args.host}: anyone who can reach it can run tools\n")
            server.run("streamable-http", host=args.host, port=args.port)
        else:
            server.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
