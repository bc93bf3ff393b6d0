"""``qnn-debug`` command line. ``main()`` maps engine errors to exit codes without tracebacks."""

from __future__ import annotations

import sys

import typer

from ..errors import QnnDebugError
from . import commands  # noqa: F401  (registers the commands on the app)
from .app import app
from .common import debug_enabled, set_flags

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    progress_json = "--progress-json" in args
    args = [a for a in args if a not in ("--debug", "--progress-json")]
    set_flags(debug=debug, progress_json=progress_json)
    try:
        app(args=args, prog_name="qnn-debug", standalone_mode=True)
    except QnnDebugError as e:  # raised outside a command's own handler
        if debug_enabled():
            raise
        sys.stderr.write(f"error: {e.one_line()}\n")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
