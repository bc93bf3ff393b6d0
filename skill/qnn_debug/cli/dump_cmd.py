"""``qnn-debug dump``: every tensor of a model on a QNN target (htp-sim here; device/host register themselves)."""

from __future__ import annotations

from typing import Any

import typer

from .builder import op_command


def human(result: Any, request: Any) -> None:
    from ..compare import fmt

    typer.echo(f"{result.target} {result.precision} run in {result.out}")
    soc_text = f"soc {result.soc_model}, arch v{result.htp_arch}" if result.soc_model else "no soc"
    qnn = f"; {result.qnn_nodes} nodes on QNN, none on CPU" if result.qnn_nodes is not None else ""
    typer.echo(f"  {result.tensors} tensors captured ({result.quantized_tensors} quantized); {soc_text}{qnn}")
    for name, db in (result.observer_effect_db or {}).items():
        typer.echo(f"  observer effect on {name}: marked vs unmarked outputs {fmt.observer(db)}")
    for w in result.warnings:
        typer.echo(f"  warning: {w}")


op_command("dump", "dump", human, help_text="Dump every intermediate tensor of MODEL on a QNN target, refusing any CPU fallback.")
