"""``qnn-debug diagnose MODEL --target htp-sim --out DIR``: baseline, dump and compare in one go."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import QnnDebugError
from .app import app
from .baseline_cmd import INPUTS_OR_TESTDIR_OPTION, SEED_OPTION, SHAPE_OPTION, default_out
from .common import FORCE_OPTION, JSON_OPTION, cli_progress, emit, fail
from .compare_cmd import print_summary
from .dump_cmd import (
    ARCH_OPTION,
    PRECISION_OPTION,
    SOC_OPTION,
    TARGET_OPTIONS_OPTION,
    TIMEOUT_OPTION,
    check_precision,
    parse_options,
)


@app.command("diagnose")
def diagnose(
    model: Path = typer.Argument(..., help="The .onnx model to diagnose."),
    target: str = typer.Option("htp-sim", "--target", help="Where QNN runs: htp-sim, device or host."),
    # no "[...]" in help texts: rich markup would swallow it (parentheses, as the other commands do)
    out: Path = typer.Option(None, "--out", help="Output directory (default: qnn-debug-runs/MODEL/diagnose-TARGET)."),
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    soc: int = SOC_OPTION,
    arch: int = ARCH_OPTION,
    precision: str = PRECISION_OPTION,
    mnn_gate: bool = typer.Option(True, "--mnn-gate/--no-mnn-gate", help="Cross-check the reference with MNN CPU."),
    option: list[str] = TARGET_OPTIONS_OPTION,
    timeout: float = TIMEOUT_OPTION,
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Build the baseline, dump every tensor on the target, compare, and report the first failing op."""
    from ..diagnose import diagnose as run_diagnose
    from ..inputs import parse_shape_args

    try:
        check_precision(precision)
        with cli_progress() as progress:
            result = run_diagnose(model, out or default_out(model, f"diagnose-{target}"), inputs=inputs,
                                  shapes=parse_shape_args(shape), target=target, precision=precision,  # type: ignore[arg-type]
                                  soc_model=soc, htp_arch=arch, seed=seed, force=force, mnn_gate=mnn_gate,
                                  target_options=parse_options(option), timeout=timeout, progress=progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"diagnosis of {model.name} in {result.out}")
        if result.baseline_sentence:
            typer.echo(f"baseline: {result.baseline_sentence}")
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
        typer.echo(f"time: baseline {t.get('baseline_s')} s, {target} {t.get('dump_s')} s (side by side), "
                   f"compare {t.get('compare_s')} s, total {t.get('total_s')} s")

    emit(result, json_out, human)
