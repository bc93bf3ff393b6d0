"""``qnn-debug dump``: every tensor of a model on a QNN target (htp-sim here; device/host register themselves)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import BadInputError, QnnDebugError
from ..mnn.soc import DEFAULT_SOC, default_soc_help
from .app import app
from .baseline_cmd import INPUTS_OR_TESTDIR_OPTION, SEED_OPTION, SHAPE_OPTION, default_out
from .common import FORCE_OPTION, JSON_OPTION, cli_progress, emit, fail

# Shared with other commands that run a QNN target (diagnose, ...).
SOC_OPTION = typer.Option(DEFAULT_SOC, "--soc", help=f"QNN soc_model ({default_soc_help()}; it decides fp16 numerics).")
ARCH_OPTION = typer.Option(None, "--arch", help="HTP architecture without the 'v' (default: the SoC's).")
PRECISION_OPTION = typer.Option("fp16", "--precision", help="fp16, or quantized for QDQ models.")
TARGET_OPTIONS_OPTION = typer.Option(None, "--option", help="Target setting key=value (repeatable).")
TIMEOUT_OPTION = typer.Option(1800.0, "--timeout", help="Seconds before the target run is abandoned.")


def check_precision(precision: str) -> None:
    """``--precision`` is a plain string option (typer choices render poorly); validate it here."""
    if precision not in ("fp16", "fp32", "quantized"):
        raise BadInputError(f"unknown --precision {precision!r}", hint="use fp16 or quantized")


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """``key=value`` pairs for target-specific settings (serial, mnn_build_dir, disabled_optimizers, ...)."""
    options: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"cannot read --option {pair!r}", hint="write it as key=value, e.g. --option serial=R58M123")
        options[key.strip()] = value.strip()
    return options


@app.command("dump")
def dump(
    model: Path = typer.Argument(..., help="The model to run (.onnx for htp-sim)."),
    target: str = typer.Option("htp-sim", "--target", help="Where QNN runs: htp-sim, device or host."),
    out: Path = typer.Option(None, "--out", help="Run directory (default: qnn-debug-runs/MODEL/TARGET-PRECISION)."),
    soc: int = SOC_OPTION,
    arch: int = ARCH_OPTION,
    precision: str = PRECISION_OPTION,
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    option: list[str] = TARGET_OPTIONS_OPTION,
    timeout: float = TIMEOUT_OPTION,
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Dump every intermediate tensor of MODEL on a QNN target, refusing any CPU fallback."""
    from ..dump import run_dump
    from ..inputs import parse_shape_args
    from ..targets import DumpRequest

    try:
        check_precision(precision)
        request = DumpRequest(
            model=model, out=out or default_out(model, f"{target}-{precision}"), target=target,
            precision=precision,
            soc_model=soc, htp_arch=arch, inputs=inputs, shapes=parse_shape_args(shape), seed=seed, force=force,
            timeout=timeout, options=parse_options(option),
        )
        with cli_progress() as progress:
            result = run_dump(request, progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"{result.target} {result.precision} run in {result.out}")
        soc_text = f"soc {result.soc_model}, arch v{result.htp_arch}" if result.soc_model else "no soc"
        qnn = f"; {result.qnn_nodes} nodes on QNN, none on CPU" if result.qnn_nodes is not None else ""
        typer.echo(f"  {result.tensors} tensors captured ({result.quantized_tensors} quantized); {soc_text}{qnn}")
        from ..compare import fmt

        for name, db in (result.observer_effect_db or {}).items():
            typer.echo(f"  observer effect on {name}: marked vs unmarked outputs {fmt.observer(db)}")
        for w in result.warnings:
            typer.echo(f"  warning: {w}")

    emit(result, json_out, human)
