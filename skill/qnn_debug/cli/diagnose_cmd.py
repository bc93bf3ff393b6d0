"""``qnn-debug diagnose MODEL --target htp-sim --out DIR``: baseline, dump and compare in one go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .builder import op_command
from .compare_cmd import print_summary


def human(result: Any, request: Any) -> None:
    typer.echo(f"diagnosis of {Path(request.model).name} in {result.out}")
    if result.baseline_sentence:
        typer.echo(f"baseline: {result.baseline_sentence}")
    if result.inputs_note:
        typer.echo(f"inputs: {result.inputs_note}")
    for w in result.warnings:
        typer.echo(f"note: {w}")
    if result.fallback is not None:
        typer.echo(f"the full dump was not used: {result.fallback.full_dump_not_used}")
        for attempt in result.fallback.attempts:
            typer.echo(f"  {attempt}")
        typer.echo(f"verdict from: {result.method}")
    if result.compare is not None:
        print_summary(result.compare)
    elif result.fallback is not None and result.fallback.bisect is not None:
        b = result.fallback.bisect
        typer.echo(f"verdict {b.verdict}: {b.summary}")
        for step in b.next_steps:
            typer.echo(f"next: {step.cli}    # {step.why}")
    t = result.timings
    typer.echo(f"time: baseline {t.get('baseline_s')} s, {request.target} {t.get('dump_s')} s (side by side), "
               f"compare {t.get('compare_s')} s, total {t.get('total_s')} s")


op_command("diagnose", "diagnose", human,
           help_text="Build the baseline, dump every tensor on the target, compare, and report the first failing op.")
