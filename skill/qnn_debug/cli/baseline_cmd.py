"""``qnn-debug baseline``: fp32 reference, fp16 floor and the MNN-CPU gate for one model and input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .builder import op_command


def human(result: Any, request: Any) -> None:
    r = result.report
    typer.echo(f"baseline of {Path(r.model).name} in {result.out}")
    typer.echo(f"  reference: {r.reference} ({result.tensors.get('reference', 0)} tensors)")
    typer.echo(f"  fp16 floor: {r.floor}" + (f" ({result.tensors['fp16_floor']} tensors)" if "fp16_floor" in result.tensors else ""))
    g = r.gate
    if g.status in ("passed", "failed"):
        first = (f"first divergent {g.first_divergent} ({g.first_divergent_op or 'graph input'}, "
                 f"{_fmt(g.first_divergent_rel_error)}); " if g.first_divergent else "")
        typer.echo(f"  MNN CPU gate: {g.status}; max rel error on outputs {_fmt(g.max_rel_error)}; {first}"
                   f"worst tensor {g.worst_tensor} ({_fmt(g.worst_tensor_rel_error)}) over {g.compared_tensors} shared tensors")
        if g.not_counted_why:
            typer.echo(f"    not counted: {g.not_counted_why}")
    else:
        typer.echo(f"  MNN CPU gate: {g.status} ({g.note})")
    if r.mnn_model is not None:
        u = r.mnn_model
        same = {True: "same model as converted here", False: "differs from the one converted here",
                None: "not compared"}[u.same_as_converted]
        typer.echo(f"  your .mnn {Path(u.path).name}: gate {u.gate.status}"
                   + (f", max rel error {_fmt(u.gate.max_rel_error)}" if u.gate.status in ("passed", "failed") else "")
                   + f"; {same}")
        if u.gate.not_counted_why:
            typer.echo(f"    not counted: {u.gate.not_counted_why}")
        for d in u.differences[:4]:
            typer.echo(f"    - {d}")
    typer.echo(f"  inputs: {result.inputs_path} ({r.inputs.source})")
    if r.inputs.note:
        typer.echo(f"  inputs note: {r.inputs.note}")
    typer.echo(r.sentence)


def _fmt(x: float | None) -> str:
    return "n/a (NaN/inf)" if x is None else f"{x:.2e}"


op_command("baseline", "baseline", human, help_text=(
    "Build the trusted baseline: ORT CPU fp32 reference, fp16 floor and the MNN CPU gate (every tensor)."))
