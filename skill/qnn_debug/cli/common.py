"""Shared CLI manners: --json output, one-line errors with exit codes, progress bars on stderr.

Conventions every command follows:
- ``--json`` prints exactly one JSON document on stdout (the command's pydantic result) and nothing else;
- human output goes to stdout, progress bars and notes to stderr;
- engine errors (:class:`~qnn_debug.errors.QnnDebugError`) become ``error: <message> (<hint>)`` on stderr
  and exit code 2 (bad input) or 3 (target failure); ``--debug`` anywhere on the line shows tracebacks.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import BaseModel

from ..errors import QnnDebugError
from ..progress import Progress, ProgressEvent, json_lines_sink

JSON_OPTION = typer.Option(False, "--json", help="Print one machine-readable JSON document on stdout.")

_state: dict[str, bool] = {"debug": False, "progress_json": False}


def set_flags(*, debug: bool, progress_json: bool) -> None:
    _state["debug"] = debug
    _state["progress_json"] = progress_json


def debug_enabled() -> bool:
    return _state["debug"]


@contextmanager
def cli_progress(enabled: bool = True) -> Iterator[Progress]:
    """A Progress that draws rich bars on stderr (or emits JSON lines for a parent process)."""
    if _state["progress_json"] or os.environ.get("QNN_DEBUG_PROGRESS") == "json":
        yield Progress(json_lines_sink(sys.stderr))
        return
    if not enabled or not sys.stderr.isatty():
        yield Progress(_plain_stderr_sink())
        return
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    with RichProgress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total}"),
        TimeElapsedColumn(), transient=False, console=_stderr_console(),
    ) as bars:
        tasks: dict[str, Any] = {}

        def sink(ev: ProgressEvent) -> None:
            if ev.stage not in tasks:
                tasks[ev.stage] = bars.add_task(ev.message or ev.stage, total=ev.total)
            bars.update(tasks[ev.stage], completed=ev.done, total=ev.total, description=ev.message or ev.stage)

        yield Progress(sink)


def _plain_stderr_sink() -> Callable[[ProgressEvent], None]:
    """Without a terminal: one line per stage start and end, so logs show what took the time."""

    def sink(ev: ProgressEvent) -> None:
        if ev.done == 0 and not ev.finished:
            sys.stderr.write(f"… {ev.message or ev.stage}\n")
        elif ev.finished:
            sys.stderr.write(f"✓ {ev.stage}\n")

    return sink


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def emit(result: BaseModel | dict[str, Any], as_json: bool, human: Callable[[], None] | None = None) -> None:
    """Print the result: JSON document, or the human rendering (defaults to indented JSON)."""
    if as_json or human is None:
        data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        sys.stdout.write(json.dumps(data, indent=None if as_json else 2, default=str) + "\n")
    else:
        human()


def fail(err: QnnDebugError, as_json: bool = False) -> None:
    if _state["debug"]:
        raise err
    if as_json:
        sys.stdout.write(json.dumps(err.to_dict()) + "\n")
    sys.stderr.write(f"error: {err.one_line()}\n")
    raise typer.Exit(err.exit_code)
