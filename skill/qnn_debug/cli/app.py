"""The typer application object; command modules register themselves on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="qnn-debug",
    help=(
        "Debug MNN's Qualcomm QNN (HTP/NPU) backend: build a trusted CPU baseline, dump every QNN tensor, "
        "find the first failing operator and tell a real bug from fp16 or quantization error. "
        "Global option: --root DIR (repeatable, anywhere on the line) keeps every file the command reads or "
        "writes inside DIR; without it paths are taken as given (the MCP server's --root is its own flag)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Debug MNN's QNN backend. Add --json to any command for machine-readable output, --debug for tracebacks."""
