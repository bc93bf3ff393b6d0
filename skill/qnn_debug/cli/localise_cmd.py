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
    typer.echo(f"block localisation of {Path(request.model).name} ({result.graph}) on {request.target} in {result.out}")
    for b in result.blocks:
        w = b.worst
        where = b.label or (f"layer {b.first}" if b.first == b.last else f"layers {b.first}..{b.last}")
        if b.missing:
            state = f"missing in the target: {', '.join(b.missing)}"
        elif b.not_judged:
            state = f"not judged: {b.not_judged[:120]}"
        elif w is None:
            state = "nothing to judge"
        else:
            state = f"worst excess {w.excess_db} dB"
        typer.echo(f"  {where:<14} {'BAD ' if b.bad else 'good'} {state}")
    typer.echo(f"verdict {result.verdict}: {result.summary}")
    for w in result.warnings:
        typer.echo(f"note: {w}")
    for step in result.next_steps:
        typer.echo(f"next: {step.cli}    # {step.why}")


op_command("bisect", "bisect", human_bisect, help_text=(
    "Truncate MODEL at cuts, run each on the target, compare with the CPU reference, narrow in ~log2 N probes."))
op_command("localise-blocks", "localise_blocks", human_blocks, help_text=(
    "Run each block (LLM decoder layers, a VL vision encoder's blocks, and the ops between them) alone on the reference "
    "values, then find the first failing op inside the first bad one. MODEL may be a VL export folder (--graph)."))
