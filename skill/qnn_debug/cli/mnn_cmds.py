"""MNN-on-the-phone commands: devices, probe, run, testdir, toggle-shape-mutable, import-dump."""

from __future__ import annotations

from typing import Any

import typer

from .builder import op_command


def human_devices(result: Any, request: Any) -> None:
    if not result.devices:
        typer.echo("no device connected (connect a phone with USB debugging on)")
    for d in result.devices:
        extra = " ".join(f"{k}:{v}" for k, v in d["details"].items())
        typer.echo(f"{d['serial']}\t{d['state']}\t{extra}".rstrip())


def human_probe(result: Any, request: Any) -> None:
    soc = f"{result.soc_name} (soc {result.soc_id}, v{result.htp_arch})" if result.soc_id else result.soc_part or "unknown SoC"
    typer.echo(f"{result.serial}: {result.model or '?'} — {soc}; files in {result.mnn_dir}:")
    for f in result.files:
        mark = "ok" if f.present else "MISSING"
        typer.echo(f"  {mark:8} {f.name}  ({f.needed_for})" + ("" if f.present else f"\n           {f.push}"))
    for n in result.notes:
        typer.echo(f"  note: {n}")
    typer.echo("ready" if result.ready else "not ready")


def human_run(result: Any, request: Any) -> None:
    typer.echo(f"{result.status.upper()}: {result.reason}")
    for j in result.report.judged:
        typer.echo(f"  {j['name']}: rel error {j['rel_error']:.4g} of max|ref| {j['max_abs_reference']:.6g}"
                   f" (MNN's signed-max rate {j['mnn_diff_rate']})")
    for nr in result.report.not_registered:
        typer.echo(f"  op {nr.op} (type {nr.type_id} {nr.type_name or ''}) has no QNN implementation: it ran on CPU")
    for w in result.warnings:
        typer.echo(f"  warning: {w}")
    typer.echo(f"run directory: {result.out}")


def human_testdir(result: Any, request: Any) -> None:
    typer.echo(f"test dir {result.dir}: inputs {', '.join(result.inputs)}; outputs {', '.join(result.outputs)}; "
               f"references for {', '.join(result.references) or 'none'}; shapeMutable {result.shape_mutable}")


def human_toggle(result: Any, request: Any) -> None:
    old = "absent (default true)" if result.old is None else str(result.old).lower()
    if result.changed:
        typer.echo(f"shapeMutable: {old} → {str(result.new).lower()} in {result.file} (backup {result.backup})")
    else:
        typer.echo(f"shapeMutable already {str(result.new).lower()} in {result.file}; nothing changed")


def human_import(result: Any, request: Any) -> None:
    typer.echo(f"imported execution {result.execution}: {result.tensors} tensors ({result.precision}) → {result.out}")
    for w in result.warnings:
        typer.echo(f"  warning: {w}")


op_command("devices", "devices", human_devices, help_text="List the phones adb sees and their state (device, unauthorized, offline).")
op_command("probe", "probe_device", human_probe,
           help_text="Report the phone's SoC and HTP arch and which runtime files are missing (with the adb push for each).",
           document=lambda r: r.model_dump(mode="json") | {"missing": [f.name for f in r.missing]})
op_command("run", "run", human_run, help_text=(
    "Run MODEL with MNN's ModuleBasic and judge it against max |reference| (ModuleBasic itself always exits 0).\n\n"
    "Exit status 1 when the run completed but an output failed the check (or QNN reported an error)."),
    exit_code=lambda r: 1 if r.status in ("failed",) else 0)
op_command("testdir", "testdir", human_testdir,
           help_text="Write an MNN test dir (input.json + <tensor>.txt) the way testMNNFromOnnx.py does, for ModuleBasic.")
op_command("toggle-shape-mutable", "toggle_shape_mutable", human_toggle,
           help_text="Set or flip shapeMutable in a test dir's input.json (atomic, previous file kept as a backup).")
op_command("import-dump", "import_dump", human_import,
           help_text="Import an MNN QNN dump directory as a run that `compare` reads like any other.")
