"""``qnn-debug baseline``: fp32 reference, fp16 floor and the MNN-CPU gate for one model and input."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import QnnDebugError
from .app import app
from .common import FORCE_OPTION, JSON_OPTION, cli_progress, emit, fail

SHAPE_OPTION = typer.Option(None, "--shape", help="Fix an input's shape: NAME=1x3x224x224 (repeatable).")
INPUTS_OPTION = typer.Option(None, "--inputs", help=".npz keyed by input name; default: seeded realistic random data.")
INPUTS_OR_TESTDIR_OPTION = typer.Option(
    None, "--inputs",
    help=".npz keyed by input name, or an MNN test dir (input.json + <input>.txt, e.g. the one a device run used); "
    "default: seeded realistic random data.")
SEED_OPTION = typer.Option(0, "--seed", help="Seed of the random inputs (ignored with --inputs).")


def default_out(model: Path, leaf: str) -> Path:
    """``qnn-debug-runs/<model stem>/<leaf>``: predictable, and never inside the model's own folder."""
    return Path("qnn-debug-runs") / model.stem / leaf


@app.command("baseline")
def baseline(
    model: Path = typer.Argument(..., help="The .onnx (or .mnn) model."),
    out: Path = typer.Option(None, "--out", help="Baseline directory (default: qnn-debug-runs/MODEL/baseline)."),
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    mnn_gate: bool = typer.Option(True, "--mnn-gate/--no-mnn-gate", help="Cross-check ONNX Runtime with MNN CPU."),
    mnn_model: Path = typer.Option(None, "--mnn-model", help="Your own .mnn of this ONNX model: gate it too and say "
                                   "whether it differs from the one converted here."),
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Build the trusted baseline: ORT CPU fp32 reference, fp16 floor and the MNN CPU gate (every tensor)."""
    from ..baseline import run_baseline
    from ..inputs import parse_shape_args

    try:
        with cli_progress() as progress:
            result = run_baseline(model, out or default_out(model, "baseline"), inputs=inputs,
                                  shapes=parse_shape_args(shape), seed=seed, force=force, progress=progress,
                                  mnn_gate=mnn_gate, mnn_model=mnn_model)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        r = result.report
        typer.echo(f"baseline of {Path(r.model).name} in {result.out}")
        typer.echo(f"  reference: {r.reference} ({result.tensors.get('reference', 0)} tensors)")
        typer.echo(f"  fp16 floor: {r.floor}" + (f" ({result.tensors['fp16_floor']} tensors)" if "fp16_floor" in result.tensors else ""))
        g = r.gate
        if g.status in ("passed", "failed"):
            typer.echo(f"  MNN CPU gate: {g.status}; max rel error on outputs {_fmt(g.max_rel_error)}; "
                       f"worst tensor {g.worst_tensor} ({_fmt(g.worst_tensor_rel_error)}) over {g.compared_tensors} shared tensors")
        else:
            typer.echo(f"  MNN CPU gate: {g.status} ({g.note})")
        if r.mnn_model is not None:
            u = r.mnn_model
            same = {True: "same model as converted here", False: "differs from the one converted here",
                    None: "not compared"}[u.same_as_converted]
            typer.echo(f"  your .mnn {Path(u.path).name}: gate {u.gate.status}"
                       + (f", max rel error {_fmt(u.gate.max_rel_error)}" if u.gate.status in ("passed", "failed") else "")
                       + f"; {same}")
            for d in u.differences[:4]:
                typer.echo(f"    - {d}")
        typer.echo(f"  inputs: {result.inputs_path} ({r.inputs.source})")
        typer.echo(r.sentence)

    emit(result, json_out, human)


def _fmt(x: float | None) -> str:
    return "n/a (NaN/inf)" if x is None else f"{x:.2e}"
