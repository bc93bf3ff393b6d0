"""``qnn-debug bisect`` and ``qnn-debug localise-blocks``: find the first failing op without one all-tensor dump."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .builder import op_command


def human_bisect(result: Any, request: Any) -> None:
    typer.echo(f"bisection of {Path(request.model).name} on {result.target} in {result.out}")
    for p in result.probes:
        w = p.worst
        typer.echo(f"  cut after {p.op:<28} ({p.frontier} tensors) "
                   f"{'BAD ' if p.bad else 'good'} worst excess {w.excess_db if w else None} dB ({p.seconds} s)")
    typer.echo(f"verdict {result.verdict}: {result.summary}")
    for step in result.next_steps:
        typer.echo(f"next: {step.cli}    # {step.why}")


def human_blocks(result: Any, request: Any) -> None:
    typer.echo(f"block localisation of {Path(request.model).name} on {request.target} in {result.out}")
    for b in result.blocks:
        w = b.worst
        where = f"layer {b.first}" if b.first == b.last else f"layers {b.first}..{b.last}"
        typer.echo(f"  {where:<14} {'BAD ' if b.bad else 'good'} worst excess {w.excess_db if w else None} dB")
    typer.echo(f"verdict {result.verdict}: {result.summary}")
    for step in result.next_steps:
        typer.echo(f"next: {step.cli}    # {step.why}")


op_command("bisect", "bisect", human_bisect, help_text=(
    "Truncate MODEL at cuts, run each on the target, compare with the CPU reference, narrow in ~log2 N probes."))
op_command("localise-blocks", "localise_blocks", human_blocks, help_text=(
    "Run each decoder block alone on the reference hidden state, then find the first failing op inside the first bad block."))
