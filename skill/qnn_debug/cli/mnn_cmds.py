"""MNN-on-the-phone commands: devices, probe, run, testdir, toggle-shape-mutable, import-dump."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import BadInputError, QnnDebugError
from .app import app
from .baseline_cmd import INPUTS_OR_TESTDIR_OPTION, SEED_OPTION, SHAPE_OPTION, default_out
from .common import FORCE_OPTION, JSON_OPTION, cli_progress, emit, fail
from .dump_cmd import parse_options

ADB_OPTION = typer.Option("adb", "--adb", help="The adb executable to use.")
SERIAL_OPTION = typer.Option(None, "--serial", "-s", help="Device serial (see `qnn-debug devices`); never read from the environment.")


def _bool_word(value: str | None, what: str) -> bool | None:
    if value is None:
        return None
    word = value.strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise BadInputError(f"{what} must be true or false, not {value!r}", hint=f"write {what} true or {what} false")


@app.command("devices")
def devices(adb: str = ADB_OPTION, json_out: bool = JSON_OPTION) -> None:
    """List the phones adb sees and their state (device, unauthorized, offline)."""
    from ..device_ops import list_devices

    try:
        result = list_devices(adb=adb)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        if not result.devices:
            typer.echo("no device connected (connect a phone with USB debugging on)")
        for d in result.devices:
            extra = " ".join(f"{k}:{v}" for k, v in d["details"].items())
            typer.echo(f"{d['serial']}\t{d['state']}\t{extra}".rstrip())

    emit(result, json_out, human)


@app.command("probe")
def probe(
    serial: str = SERIAL_OPTION,
    adb: str = ADB_OPTION,
    mnn_dir: str = typer.Option(None, "--mnn-dir", help="Device dir with ModuleBasic.out and the libraries."),
    mode: str = typer.Option("offline", "--mode", help="offline (MNN2QNNModel models) or online: which libraries are needed."),
    qnn_sdk: str = typer.Option(None, "--qnn-sdk", help="QNN SDK root, to fill in the push commands."),
    mnn_build: str = typer.Option(None, "--mnn-build", help="MNN Android build dir, to fill in the push commands."),
    ndk: str = typer.Option(None, "--ndk", help="Android NDK root, to fill in the push command of libc++_shared.so."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Report the phone's SoC and HTP arch and which runtime files are missing (with the adb push for each)."""
    from ..device_ops import probe as do_probe

    try:
        with cli_progress() as progress, progress.stage("probe", total=None, message="probing the phone"):
            result = do_probe(serial=serial, adb=adb, mnn_dir=mnn_dir, mode=mode, qnn_sdk=qnn_sdk, mnn_build=mnn_build, ndk=ndk)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        soc = f"{result.soc_name} (soc {result.soc_id}, v{result.htp_arch})" if result.soc_id else result.soc_part or "unknown SoC"
        typer.echo(f"{result.serial}: {result.model or '?'} — {soc}; files in {result.mnn_dir}:")
        for f in result.files:
            mark = "ok" if f.present else "MISSING"
            typer.echo(f"  {mark:8} {f.name}  ({f.needed_for})" + ("" if f.present else f"\n           {f.push}"))
        for n in result.notes:
            typer.echo(f"  note: {n}")
        typer.echo("ready" if result.ready else "not ready")

    emit(result.model_dump(mode="json") | {"missing": [f.name for f in result.missing]}, json_out, human)


@app.command("run")
def run(
    model: Path = typer.Argument(..., help="The .mnn model (or an MNN2QNNModel wrapper)."),
    target: str = typer.Option("device", "--target", help="device (adb) or host (local MNN build)."),
    forward: str = typer.Option("qnn", "--forward", help="qnn (type 5), cpu (0) or opencl (3)."),
    precision: str = typer.Option("low", "--precision", help="low (fp16), high (fp32 tensors; HTP still computes in fp16) or normal."),
    testdir: Path = typer.Option(None, "--testdir", help="Run this MNN test dir (input.json + txt files)."),
    baseline: Path = typer.Option(None, "--baseline", help="Use this baseline's inputs and fp32 reference outputs."),
    out: Path = typer.Option(None, "--out", help="Run directory (default: qnn-debug-runs/MODEL/TARGET-run)."),
    serial: str = SERIAL_OPTION,
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    option: list[str] = typer.Option(None, "--option", help="Target setting key=value (repeatable): mnn_build_dir, qnn_lib_dir, adb, mnn_dir, ..."),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds before the run is abandoned."),
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Run MODEL with MNN's ModuleBasic and judge it against max |reference| (ModuleBasic itself always exits 0).

    Exit status 1 when the run completed but an output failed the check (or QNN reported an error).
    """
    from ..device_ops import run_model
    from ..inputs import parse_shape_args

    try:
        if target not in ("device", "host"):
            raise BadInputError(f"unknown --target {target!r}", hint="use device or host")
        opts = parse_options(option)
        if serial:
            opts["serial"] = serial
        with cli_progress() as progress:
            result = run_model(model, target=target,  # type: ignore[arg-type]
                               out=out or default_out(model, f"{target}-run"), forward=forward, precision=precision,
                               testdir=testdir, baseline=baseline, inputs=inputs, shapes=parse_shape_args(shape), seed=seed,
                               options=opts, force=force, timeout=timeout, progress=progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"{result.status.upper()}: {result.reason}")
        for j in result.report.judged:
            typer.echo(f"  {j['name']}: rel error {j['rel_error']:.4g} of max|ref| {j['max_abs_reference']:.6g}"
                       f" (MNN's signed-max rate {j['mnn_diff_rate']})")
        for nr in result.report.not_registered:
            typer.echo(f"  op {nr.op} (type {nr.type_id} {nr.type_name or ''}) has no QNN implementation: it ran on CPU")
        for w in result.warnings:
            typer.echo(f"  warning: {w}")
        typer.echo(f"run directory: {result.out}")

    emit(result, json_out, human)
    if result.status in ("failed",):
        raise typer.Exit(1)


@app.command("testdir")
def testdir(
    out: Path = typer.Argument(..., help="Test directory to write."),
    baseline: Path = typer.Option(None, "--baseline", help="Baseline dir: its exact inputs and fp32 reference outputs."),
    model: Path = typer.Option(None, "--model", help="Without a baseline: the .mnn whose inputs to write (no references)."),
    inputs: Path = INPUTS_OR_TESTDIR_OPTION,
    shape: list[str] = SHAPE_OPTION,
    seed: int = SEED_OPTION,
    shape_mutable: str = typer.Option("false", "--shape-mutable", help="true, false (needed by QNN online) or absent."),
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Write an MNN test dir (input.json + <tensor>.txt) the way testMNNFromOnnx.py does, for ModuleBasic."""
    from ..device_ops import make_testdir
    from ..inputs import parse_shape_args

    try:
        mutable = None if shape_mutable.strip().lower() == "absent" else _bool_word(shape_mutable, "--shape-mutable")
        result = make_testdir(out, baseline=baseline, model=model, inputs=inputs, shapes=parse_shape_args(shape), seed=seed,
                              shape_mutable=mutable, force=force)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"test dir {result.dir}: inputs {', '.join(result.inputs)}; outputs {', '.join(result.outputs)}; "
                   f"references for {', '.join(result.references) or 'none'}; shapeMutable {result.shape_mutable}")

    emit(result, json_out, human)


@app.command("toggle-shape-mutable")
def toggle_shape_mutable(
    directory: Path = typer.Argument(..., help="MNN test dir holding input.json."),
    value: str = typer.Option(None, "--value", help="true or false; without it the value is flipped."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Set or flip shapeMutable in a test dir's input.json (atomic, previous file kept as a backup)."""
    from ..mnn.testdir import toggle_shape_mutable as toggle

    try:
        result = toggle(directory, _bool_word(value, "--value"))
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        old = "absent (default true)" if result.old is None else str(result.old).lower()
        if result.changed:
            typer.echo(f"shapeMutable: {old} → {str(result.new).lower()} in {result.file} (backup {result.backup})")
        else:
            typer.echo(f"shapeMutable already {str(result.new).lower()} in {result.file}; nothing changed")

    emit(result, json_out, human)


@app.command("import-dump")
def import_dump(
    dump_dir: Path = typer.Argument(..., help="MNN's qnn_intermediate_outputs dir (manifest_*.tsv + .raw)."),
    model: Path = typer.Option(None, "--model", help="The source .mnn (names t<N>, ops and layouts)."),
    out: Path = typer.Option(..., "--out", help="Run directory to write."),
    execution: int = typer.Option(None, "--execution", help="Which execution to import (default: the newest)."),
    reference: Path = typer.Option(None, "--reference", help="Run or baseline dir whose tensor shapes settle layouts."),
    force: bool = FORCE_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Import an MNN QNN dump directory as a run that `compare` reads like any other."""
    from ..device_ops import import_dump as do_import

    try:
        with cli_progress() as progress:
            result = do_import(dump_dir, out=out, model=model, execution=execution, reference=reference, force=force,
                               progress=progress)
    except QnnDebugError as e:
        fail(e, json_out)

    def human() -> None:
        typer.echo(f"imported execution {result.execution}: {result.tensors} tensors ({result.precision}) → {result.out}")
        for w in result.warnings:
            typer.echo(f"  warning: {w}")

    emit(result, json_out, human)
