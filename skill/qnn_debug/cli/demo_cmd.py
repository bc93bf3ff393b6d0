"""``qnn-debug demo``: build the bundled example, baseline it and dump it on the HTP simulator."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import QnnDebugError
from .app import app
from .common import JSON_OPTION, cli_progress, emit, fail


@app.command("demo")
def demo(
    out: Path = typer.Option(Path("demo-runs"), "--out", help="Where the demo writes (a previous demo there is replaced)."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Run the engine end to end on a small model the project builds itself and show what it captured."""
    from ..demo import run_demo

    try:
        with cli_progress() as progress:
            result = run_demo(out, progress=progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"demo in {result.out}")
        for i, step in enumerate(result.steps, 1):
            typer.echo(f"{i}. {step.name}: {step.summary}")
            if step.path:
                typer.echo(f"   → {step.path}")

    emit(result, json_out, human)
