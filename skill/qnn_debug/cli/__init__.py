"""``qnn-debug`` command line. ``main()`` maps engine errors to exit codes without tracebacks."""

from __future__ import annotations

import json
import signal
import sys

import typer

from ..errors import BadInputError, QnnDebugError, flatten_message, missing_dependency
from ..fs import os_error, set_roots
from . import commands  # noqa: F401  (registers the commands on the app)
from .app import app
from .common import debug_enabled, set_flags

__all__ = ["app", "main"]


def take_roots(args: list[str]) -> tuple[list[str], list[str]]:
    """Split ``--root DIR`` / ``--root=DIR`` (anywhere on the line, repeatable) from the other arguments."""
    roots: list[str] = []
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == "--root":
            value = next(it, None)
            if value is None:
                raise BadInputError("--root needs a directory", hint="write --root DIR")
            roots.append(value)
        elif a.startswith("--root="):
            roots.append(a[len("--root="):])
        else:
            rest.append(a)
    return roots, rest


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (a cancelled MCP call, a timeout) unwinds like an error, so temp folders are removed."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminated)
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    progress_json = "--progress-json" in args
    as_json = "--json" in args
    args = [a for a in args if a not in ("--debug", "--progress-json")]
    set_flags(debug=debug, progress_json=progress_json)
    try:
        roots, args = take_roots(args)
        if roots:  # every file the engine then opens must lie inside these folders
            set_roots(roots)
    except QnnDebugError as e:
        _exit_with(e, as_json)
    try:
        app(args=args, prog_name="qnn-debug", standalone_mode=True)
    except QnnDebugError as e:  # raised outside a command's own handler
        if debug_enabled():
            raise
        _exit_with(e, False)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except Exception as e:  # a bug or an input we did not foresee: still one typed document, no traceback
        if debug_enabled():
            raise
        _exit_with(unexpected(e), as_json)


def unexpected(e: Exception) -> QnnDebugError:
    """An exception no command handled, as a typed error (hostile input must never give a traceback)."""
    if isinstance(e, OSError):
        return os_error(e, e.filename or "?", "file")
    if isinstance(e, ImportError) and (missing := missing_dependency(e)) is not None:
        return missing
    if isinstance(e, MemoryError | RecursionError | OverflowError):
        return BadInputError(f"the input is too large or too deeply nested ({type(e).__name__})",
                             hint="pass smaller inputs; check the files for damage")
    return QnnDebugError(f"internal error: {type(e).__name__}: {flatten_message(str(e), 300)}",
                         hint="rerun with --debug for the traceback and report it as a bug")


def _exit_with(err: QnnDebugError, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(err.to_dict(), default=str) + "\n")
    sys.stderr.write(f"error: {err.one_line()}\n")
    sys.exit(err.exit_code)
