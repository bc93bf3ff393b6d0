"""Engine entry points behind ``qnn-debug devices|probe|run|testdir|toggle-shape-mutable|import-dump``.

The CLI and the MCP server call these and nothing below them, so both answer the same pydantic models.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from .device_models import DevicesResult, ImportResult, RunModelResult
from .errors import BadInputError
from .mnn.modulebasic import ModuleBasicReport, forward_type, precision_value
from .mnn.soc import DEFAULT_SOC
from .mnn.testdir import TestDirInfo
from .progress import NULL_PROGRESS, Progress
from .runstore import load_run
from .targets import Precision


def list_devices(*, adb: str = "adb", timeout: float = 30.0) -> DevicesResult:
    """Every phone adb sees, with its state (device / unauthorized / offline)."""
    from .device.adb import Adb

    devices = Adb(adb=adb, timeout=timeout).devices()
    return DevicesResult(devices=devices, ready=[d.serial for d in devices if d.state == "device"])


def probe(*, serial: str | None = None, adb: str = "adb", mnn_dir: str | None = None, mode: str = "offline",
          qnn_sdk: str | None = None, mnn_build: str | None = None, ndk: str | None = None,
          timeout: float = 60.0) -> Any:
    """SoC, HTP arch and the runtime files present on the phone (with push commands for missing ones)."""
    from .device.adb import Adb
    from .device.probe import probe_device
    from .targets.device import DEFAULT_MNN_DIR

    if mode not in ("online", "offline"):
        raise BadInputError(f"unknown mode {mode!r}", hint="use online or offline")
    return probe_device(Adb(serial, adb=adb, timeout=timeout), mnn_dir=mnn_dir or DEFAULT_MNN_DIR, qnn_sdk=qnn_sdk,
                        mnn_build=mnn_build, ndk=ndk, mode=mode)


_PRECISION_TO_RUN: dict[str, Precision] = {"low": "fp16", "normal": "fp16", "low_bf16": "fp16", "high": "fp32"}


def run_model(model: str | os.PathLike[str], *, target: Literal["device", "host"], out: str | os.PathLike[str],
              forward: str = "qnn", precision: str = "low", testdir: str | os.PathLike[str] | None = None,
              baseline: str | os.PathLike[str] | None = None, inputs: str | os.PathLike[str] | None = None,
              shapes: dict[str, list[int]] | None = None, seed: int = 0, options: dict[str, str] | None = None,
              force: bool = False, timeout: float = 1800.0, soc_model: int = DEFAULT_SOC, htp_arch: int | None = None,
              progress: Progress = NULL_PROGRESS) -> RunModelResult:
    """Run ``model`` with ModuleBasic on a phone or a local build, exactly as MNN's own test does."""
    from .targets import TARGETS, DumpRequest, get_target
    from .targets import target as target_named

    runners = [n for n in TARGETS if target_named(n).capabilities.module_basic]
    if target not in runners:
        raise BadInputError(f"unknown target {target!r}", hint=f"use {' or '.join(runners)}")
    fwd = forward_type(forward)
    precision_value(precision)  # validates
    opts = dict(options or {})
    opts.setdefault("forward", str(fwd))
    opts.setdefault("mnn_precision", precision)
    opts.setdefault("runner", "modulebasic")  # `run` is ModuleBasic's own test, on the host too
    if "mode" not in opts and not ({"mnn2qnn", "plugin_model"} & set(opts)):
        opts["mode"] = "online"
    if testdir is not None:
        opts["testdir"] = str(testdir)
    if baseline is not None:
        opts["baseline"] = str(baseline)
        if inputs is None and testdir is None:
            from .baseline import load_baseline

            inputs = load_baseline(baseline).inputs_path
    request = DumpRequest(model=Path(model), out=Path(out), target=target,
                          precision=_PRECISION_TO_RUN.get(precision.lower(), "fp16"),
                          soc_model=soc_model, htp_arch=htp_arch, inputs=Path(inputs) if inputs else None,
                          shapes=shapes or {}, seed=seed, force=force, timeout=timeout, options=opts)
    run = get_target(target)(request, progress)
    report = ModuleBasicReport.model_validate(run.record.extra.get("modulebasic", {}))
    warnings = list(run.record.warnings)
    if baseline is not None:
        warnings += _modulebasic_rule(baseline, report)
    return RunModelResult(status=report.status, reason=report.reason, out=str(run.dir), target=target,
                          mode=str(run.record.extra.get("mode")), forward_type=fwd, report=report,
                          tensors=len(run.record.tensors), warnings=warnings)


def _modulebasic_rule(baseline: str | os.PathLike[str], report: ModuleBasicReport) -> list[str]:
    """Reading ModuleBasic's TESTERROR: where the baseline's fp16 floor itself misses its 1 % rule, say so."""
    import numpy as np

    from .baseline import load_baseline
    from .compare.modulebasic_rule import floor_rates, notes

    base = load_baseline(baseline)
    if base.floor is None:
        return []
    names = [n for n in (report.outputs or base.reference.record.outputs) if base.reference.has(n) and base.floor.has(n)]
    rates = floor_rates({n: np.asarray(base.reference.array(n)) for n in names},
                        {n: np.asarray(base.floor.array(n)) for n in names})
    found = notes(rates)
    if found and report.status == "failed":
        report.reason += " (" + "; ".join(f"{n}: the fp16 floor misses ModuleBasic's 1% rule too"
                                          for n, r in rates.items() if r > 0.01) + ")"
    return found


def make_testdir(out: str | os.PathLike[str], *, baseline: str | os.PathLike[str] | None = None,
                 model: str | os.PathLike[str] | None = None, inputs: str | os.PathLike[str] | None = None,
                 shapes: dict[str, list[int]] | None = None, seed: int = 0, shape_mutable: bool | None = False,
                 force: bool = False) -> TestDirInfo:
    """A ModuleBasic test dir from a baseline (inputs + fp32 references) or from a model's inputs alone."""
    from .mnn.testdir_builder import write_testdir

    if baseline is not None:
        return testdir_from_baseline(baseline, out, shape_mutable=shape_mutable, force=force)
    if model is None:
        raise BadInputError("nothing to build the test dir from", hint="pass --baseline DIR (recommended) or --model X.mnn")
    from .inputs import prepare_inputs
    from .mnn.model_reader import read_mnn_model
    from .runstore import TensorSpec

    m = read_mnn_model(model)
    specs = [TensorSpec(name=i.name, shape=[d if d > 0 else None for d in i.shape], dtype=i.dtype) for i in m.inputs]
    prepared = prepare_inputs(specs, inputs=inputs, shapes=shapes, seed=seed)
    return write_testdir(out, prepared.arrays, m.output_names, shape_mutable=shape_mutable, force=force)


def testdir_from_baseline(baseline_dir: str | os.PathLike[str], out: str | os.PathLike[str], *,
                          shape_mutable: bool | None = False, force: bool = False) -> TestDirInfo:
    """A test dir with the baseline's exact inputs and its fp32 reference outputs.

    ``shapeMutable`` defaults to false because that is what MNN's QNN online backend needs; pass None to
    leave the key out (ModuleBasic's default, as testMNNFromOnnx writes it).
    """
    import numpy as np

    from .baseline import load_baseline
    from .mnn.testdir_builder import write_testdir
    from .npz_safe import load_npz

    base = load_baseline(baseline_dir)
    arrays = load_npz(base.inputs_path)  # checked and opened through fs: a FIFO or a zip bomb is refused
    ref = base.reference
    names = ref.record.model.inputs if ref.record.model else []
    order = [s.name for s in names if s.name in arrays] or list(arrays)
    outputs = list(ref.record.outputs)
    references = {n: np.asarray(ref.array(n)) for n in outputs if ref.has(n)}
    return write_testdir(out, {n: arrays[n] for n in order}, outputs, references=references,
                         shape_mutable=shape_mutable, force=force)


def import_dump(dump_dir: str | os.PathLike[str], *, out: str | os.PathLike[str], model: str | os.PathLike[str] | None = None,
                execution: int | None = None, reference: str | os.PathLike[str] | None = None, force: bool = False,
                progress: Progress = NULL_PROGRESS) -> ImportResult:
    """Import an MNN QNN dump dir; ``reference`` (a run or baseline dir) supplies exact tensor shapes."""
    from .mnn.dump_reader import import_mnn_dump

    shapes = _reference_shapes(Path(reference)) if reference is not None else None
    run = import_mnn_dump(dump_dir, mnn_model=model, execution=execution, out=out, force=force, shapes=shapes,
                          progress=progress)
    rec = run.record
    return ImportResult(out=str(run.dir), execution=int(rec.extra["execution"]), tensors=len(rec.tensors),
                        precision=rec.precision, outputs=rec.outputs, warnings=rec.warnings)


def _reference_shapes(path: Path) -> dict[str, list[int]]:
    if (path / "baseline.json").is_file():
        from .baseline import load_baseline

        run = load_baseline(path).reference
    else:
        run = load_run(path)
    return {t.name: list(t.shape) for t in run.tensors}
