"""``qnn-debug bisect`` and ``qnn-debug localise-blocks``: find the first failing op without one all-tensor dump."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import BadInputError, QnnDebugError
from ..targets import check_target
from .app import app
from .baseline_cmd import INPUTS_OR_TESTDIR_OPTION, SEED_OPTION, SHAPE_OPTION, default_out
from .common import FORCE_OPTION, JSON_OPTION, cli_progress, emit, fail
from .dump_cmd import ARCH_OPTION, SOC_OPTION, TARGET_OPTIONS_OPTION, TIMEOUT_OPTION, parse_options
from .mnn_cmds import SERIAL_OPTION

REFERENCE_MODEL_OPTION = typer.Option(
    None, "--reference-model",
    help="The model the CPU reference runs (default: MODEL); give the original when MODEL is an edited copy.")
BASELINE_OPTION = typer.Option(None, "--baseline", help="Reuse this baseline directory (htp-sim) instead of building one.")


@app.command("bisect")
def bisect(
    model: Path = typer.Argument(..., help="The .onnx model (device/host: each cut is converted to .mnn)."),
    target: str = typer.Option("htp-sim", "--target", help="Where QNN runs: htp-sim, device or host."),
    out: Path = typer.Option(None, "--out", help="Output directory (default: qnn-debug-runs/MODEL/bisect-TARGET)."),
    reference_model: Path = REFERENCE_MODEL_OPTION,
    baseline: Path = BASELINE_OPTION,
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    soc: int = SOC_OPTION,
    arch: int = ARCH_OPTION,
    opencl: bool = typer.Option(False, "--opencl", help="device/host: also run OpenCL fp16 as a third opinion."),
    mnn_gate: bool = typer.Option(True, "--mnn-gate/--no-mnn-gate", help="Cross-check the reference with MNN CPU."),
    option: list[str] = TARGET_OPTIONS_OPTION,
    timeout: float = TIMEOUT_OPTION,
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Truncate MODEL at cuts, run each on the target, compare with the CPU reference, narrow in ~log2 N probes."""
    from ..inputs import parse_shape_args
    from ..localise.bisect import BisectRequest, run_bisect

    try:
        check_target(target)
        request = BisectRequest(model=model, out=out or default_out(model, f"bisect-{target}"), target=target,
                                reference_model=reference_model, baseline=baseline, inputs=inputs,
                                shapes=parse_shape_args(shape), seed=seed, soc_model=soc, htp_arch=arch,
                                options=parse_options(option), opencl=opencl, mnn_gate=mnn_gate, force=force,
                                timeout=timeout)
        with cli_progress() as progress:
            result = run_bisect(request, progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"bisection of {model.name} on {result.target} in {result.out}")
        for p in result.probes:
            w = p.worst
            typer.echo(f"  cut after {p.op:<28} ({p.frontier} tensors) "
                       f"{'BAD ' if p.bad else 'good'} worst excess {w.excess_db if w else None} dB ({p.seconds} s)")
        typer.echo(f"verdict {result.verdict}: {result.summary}")
        for step in result.next_steps:
            typer.echo(f"next: {step.cli}    # {step.why}")

    emit(result, json_out, human)


@app.command("localise-blocks")
def localise_blocks(
    model: Path = typer.Argument(..., help="The decoder's .onnx (node names carry /layers.N/), e.g. llmexport's onnx/llm.onnx."),
    target: str = typer.Option("htp-sim", "--target",
                               help="htp-sim (all blocks in one simulator session), device (each block's .mnn dumped "
                                    "with MNN2QNNModel on the phone: --option mnn2qnn=… --option qnn_sdk=…) or host."),
    serial: str = SERIAL_OPTION,
    out: Path = typer.Option(None, "--out", help="Output directory (default: qnn-debug-runs/MODEL/blocks[-TARGET])."),
    reference_model: Path = REFERENCE_MODEL_OPTION,
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    layers_per_block: int = typer.Option(1, "--layers-per-block", help="Decoder layers cut out together."),
    inner: str = typer.Option("diagnose", "--inner",
                              help="Inside the first failing block: diagnose (dump + compare), bisect, or none."),
    soc: int = SOC_OPTION,
    arch: int = ARCH_OPTION,
    option: list[str] = TARGET_OPTIONS_OPTION,
    timeout: float = TIMEOUT_OPTION,
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Run each decoder block alone on the reference hidden state, then find the first failing op inside the first bad block."""
    from ..inputs import parse_shape_args
    from ..localise.blocks import BlockRequest, run_blocks

    try:
        if inner not in ("diagnose", "bisect", "none"):
            raise BadInputError(f"unknown --inner {inner!r}", hint="use diagnose, bisect or none")
        check_target(target)
        options = parse_options(option)
        if serial:
            if target != "device":
                raise BadInputError("--serial applies to --target device only", hint="drop --serial or add --target device")
            options["serial"] = serial
        leaf = "blocks" if target == "htp-sim" else f"blocks-{target}"
        request = BlockRequest(model=model, out=out or default_out(model, leaf), reference_model=reference_model, target=target,
                               inputs=inputs, shapes=parse_shape_args(shape), seed=seed,
                               layers_per_block=layers_per_block, inner=inner,
                               soc_model=soc, htp_arch=arch, options=options, force=force, timeout=timeout)
        with cli_progress() as progress:
            result = run_blocks(request, progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"block localisation of {model.name} on {target} in {result.out}")
        for b in result.blocks:
            w = b.worst
            where = f"layer {b.first}" if b.first == b.last else f"layers {b.first}..{b.last}"
            typer.echo(f"  {where:<14} {'BAD ' if b.bad else 'good'} worst excess {w.excess_db if w else None} dB")
        typer.echo(f"verdict {result.verdict}: {result.summary}")
        for step in result.next_steps:
            typer.echo(f"next: {step.cli}    # {step.why}")

    emit(result, json_out, human)
