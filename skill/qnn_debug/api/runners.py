"""The code behind each operation: request model in, result model out, engine calls in between.

Kept thin: each runner only translates its request into the engine function's arguments. Engine code is
imported inside each runner, so loading this module stays as cheap as loading the models.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInputError
from ..progress import Progress
from . import requests as rq
from .options import engine_options
from .requests_targets import CompareTargetsRequest

if TYPE_CHECKING:
    from ..baseline_models import BaselineResult
    from ..compare.schema import CompareResult
    from ..compare.targets_models import TargetsComparison
    from ..device.probe import ProbeResult
    from ..device_models import DevicesResult, ImportResult, RunModelResult
    from ..diagnose_models import DiagnoseResult
    from ..dump_models import DumpResult
    from ..fix.models import FixResult
    from ..llm.check_models import LlmCheckResult
    from ..llm.text_models import LlmTextResult
    from ..localise.models import BisectResult, BlockResult
    from ..mnn.models import TestDirInfo, ToggleResult
    from ..ops.models import OpConstraints
    from ..triage.cases import CaseFile
    from ..triage.models import TriageResult

RUNS_DIR = "qnn-debug-runs"


def out_dir(request: rq.Request, out: str | None) -> Path:
    """``out``, or ``qnn-debug-runs/<group>/<leaf>`` from the request's :meth:`~.requests.Request.default_out`."""
    if out is not None:
        return Path(out)
    where = request.default_out()
    if where is None:
        raise BadInputError(f"{type(request).__name__} has no default output folder", hint="pass out")
    return Path(RUNS_DIR, *where)


def _target_options(request: rq.TargetRun) -> dict[str, str]:
    from ..targets import check_target

    check_target(request.target)
    return engine_options(request.options, request.extra_options, target=request.target, serial=request.serial,
                          adb=request.adb)


def _prepared(model: str | Path, request: rq.Request, reference: str | Path | None = None,
              image: str | None = None) -> tuple[str, str | None, dict[str, list[int]], str | None, list[str]]:
    """The one preparation step every model-taking tool runs (:func:`qnn_debug.llm.onnx_export.prepare_model`): a real
    llmexport graph gets its custom ops in standard ONNX, its prefill shapes and its runtime inputs; any other model
    passes through. Returns (model, reference, shapes, inputs, notes)."""
    from ..llm.onnx_export import prepare_model

    shapes = dict(getattr(request, "shapes", None) or {})
    inputs = getattr(request, "inputs", None)
    seed = int(getattr(request, "seed", 0) or 0)
    p = prepare_model(model, shapes=shapes, inputs=inputs, seed=seed, image=image)
    ref = None
    if reference is not None:
        # prepared alike (the same user inputs or none, so the same inputs folded); it is fed the model's inputs
        r = prepare_model(reference, shapes=shapes, inputs=inputs, seed=seed, image=image)
        ref = r.model
    return p.model, ref, p.shapes or shapes, p.inputs or inputs, p.notes  # p.inputs: built, or the user's without a folded input


def triage(request: rq.TriageRequest, progress: Progress) -> TriageResult:
    from .. import fs
    from ..triage import triage_log
    from ..triage.cases import DEFAULT_NAME

    if (request.log_text is None) == (request.log_path is None):
        raise BadInputError("pass exactly one of log_text or log_path", hint="paste the log as log_text, or give log_path")
    cases = request.cases_path
    if cases is None and Path(DEFAULT_NAME).is_file():
        cases = DEFAULT_NAME
    if request.log_path is not None:
        if request.log_path != "-":  # inside the roots, a regular file: a FIFO or device would hang the scan
            fs.check(request.log_path, what="log file", kind="file")
        return triage_log(request.log_path, cases=cases)
    return triage_log(text=request.log_text, cases=cases)


def op_lookup(request: rq.OpLookupRequest, progress: Progress) -> OpConstraints:
    from ..ops import lookup_op_constraints

    attrs = [f"{k}={v}" for k, v in (request.attrs or {}).items()]
    return lookup_op_constraints(request.op, sdk=request.sdk, probe=request.probe or bool(request.shapes or attrs),
                                 shapes=request.shapes or [], attrs=attrs, soc_model=request.soc, opset=request.opset,
                                 progress=progress)


def baseline(request: rq.BaselineRequest, progress: Progress) -> BaselineResult:
    from ..baseline import run_baseline

    model, _, shapes, inputs, _notes = _prepared(request.model, request)
    out = out_dir(request, request.out)
    _check_disk(out, "baseline", model, shapes, inputs)
    return run_baseline(model, out, inputs=inputs, shapes=shapes or None,
                        seed=request.seed, force=request.force, progress=progress, mnn_gate=request.mnn_gate,
                        mnn_model=request.mnn_model)


def dump(request: rq.DumpRequest, progress: Progress) -> DumpResult:
    from .. import targets
    from ..dump import run_dump

    options = _target_options(request)
    model, _, shapes, inputs, notes = _prepared(request.model, request)
    out = out_dir(request, request.out)
    _check_disk(out, "dump", model, shapes, inputs)
    result = run_dump(targets.DumpRequest(
        model=Path(model), out=out, target=request.target,
        precision=request.precision, soc_model=request.soc, htp_arch=request.arch,
        inputs=Path(inputs) if inputs else None, shapes=shapes, seed=request.seed,
        force=request.force, timeout=request.timeout, options=options), progress)
    result.warnings[:0] = notes
    return result


def compare(request: rq.CompareRequest, progress: Progress) -> CompareResult:
    from ..compare.pipeline import CompareOptions, compare_paths
    from ..llm.onnx_export import prepared_path

    return compare_paths(request.reference, request.target, model=prepared_path(request.model), mnn_model=request.mnn_model,
                         execution=request.execution, report_dir=request.report_dir, json_path=request.json_path,
                         options=CompareOptions(local_checks=request.local_checks), progress=progress,
                         fp16_codes=request.fp16_codes)


def compare_targets(request: CompareTargetsRequest, progress: Progress) -> TargetsComparison:
    from ..compare.targets_diff import compare_targets as run

    return run(request.baseline, request.target_a, request.target_b, label_a=request.label_a,
               label_b=request.label_b, model=request.model, mnn_model=request.mnn_model, progress=progress)


def diagnose(request: rq.DiagnoseRequest, progress: Progress) -> DiagnoseResult:
    from ..diagnose import diagnose as run_diagnose

    options = _target_options(request)
    model, reference, shapes, inputs, notes = _prepared(request.model, request, request.reference_model)
    out = out_dir(request, request.out)
    _check_disk(out, "diagnose", model, shapes, inputs)
    result = run_diagnose(model, out, inputs=inputs, shapes=shapes or None,
                          target=request.target, precision=request.precision, soc_model=request.soc,
                          htp_arch=request.arch, seed=request.seed, force=request.force, mnn_gate=request.mnn_gate,
                          target_options=options, timeout=request.timeout, mnn_model=request.mnn_model,
                          reference_model=reference, max_memory=_bytes(request.max_memory),
                          workers=request.workers, cluster=request.cluster, progress=progress)
    result.warnings[:0] = notes
    return result


def bisect(request: rq.BisectRequest, progress: Progress) -> BisectResult:
    from ..localise import bisect as engine

    options = _target_options(request)
    model, reference, shapes, inputs, notes = _prepared(request.model, request, request.reference_model)
    out = out_dir(request, request.out)
    if not request.baseline:  # the baseline is most of what bisect writes
        _check_disk(out, "bisect", model, shapes, inputs)
    result = engine.run_bisect(engine.BisectRequest(
        model=Path(model), out=out, target=request.target,
        reference_model=reference, baseline=request.baseline, inputs=request.inputs if request.baseline else inputs,
        shapes=shapes, seed=request.seed, soc_model=request.soc, htp_arch=request.arch, options=options,
        opencl=request.opencl, mnn_gate=request.mnn_gate, force=request.force, timeout=request.timeout,
        max_memory=_bytes(request.max_memory), workers=request.workers, cluster=request.cluster), progress)
    result.warnings[:0] = notes
    return result


def _check_disk(out: Path, tool: str, model: str, shapes: dict[str, list[int]], inputs: str | None) -> None:
    """Refuse a run whose tensors cannot fit the disk of ``out`` before it starts (:mod:`qnn_debug.disk_room`)."""
    if str(model).endswith(".onnx") and Path(model).is_file():  # else the tool's own reading says what is wrong
        from ..disk_room import check_disk_room

        check_disk_room(out, tool, model, shapes or None, inputs)


def _bytes(size: str | None) -> int | None:
    from ..localise.budget import parse_size

    return parse_size(size) if size else None


def localise_blocks(request: rq.LocaliseBlocksRequest, progress: Progress) -> BlockResult:
    from ..localise import blocks as engine

    if request.options is not None:
        _target_options(request)  # options off the phone or host build: refused by the general rule first
    from ..targets import TARGETS, target

    adb_targets = [n for n in TARGETS if target(n).capabilities.over_adb]
    if request.serial and request.target not in adb_targets:
        raise BadInputError(f"--serial applies to --target {' or '.join(adb_targets)} only",
                            hint=f"drop --serial or add --target {' or '.join(adb_targets)}")
    options = _target_options(request)
    from ..llm.vl_folder import graph_in_folder
    from ..localise.budget import parse_size

    found = graph_in_folder(Path(request.model), request.graph)
    ref_found = graph_in_folder(Path(request.reference_model), request.graph) if request.reference_model else None
    model, reference, shapes, inputs, notes = _prepared(found, request, ref_found, image=request.image)
    result = engine.run_blocks(engine.BlockRequest(
        model=Path(model), out=out_dir(request, request.out), reference_model=Path(reference) if reference else None,
        image=Path(request.image) if request.image else None,
        target=request.target, inputs=inputs, shapes=shapes, seed=request.seed,
        layers_per_block=request.layers_per_block, inner=request.inner, soc_model=request.soc, htp_arch=request.arch,
        options=options, force=request.force, timeout=request.timeout,
        max_memory=parse_size(request.max_memory) if request.max_memory else None, workers=request.workers,
        cluster=request.cluster), progress)
    result.warnings[:0] = notes
    return result


def llm_check(request: rq.LlmCheckRequest, progress: Progress) -> LlmCheckResult:
    from ..llm import check_models
    from ..llm.check import check_llm_export

    return check_llm_export(check_models.LlmCheckRequest(export_dir=request.export_dir, qnn_dir=request.qnn_dir,
                                                         max_history_token=request.max_history_token,
                                                         image_sizes=request.image_sizes))


def llm_text(request: rq.LlmTextRequest, progress: Progress) -> LlmTextResult:
    from .. import fs
    from ..llm import text_models
    from ..llm.llm_demo import DeviceTextTarget
    from ..llm.text import llm_text as run_llm_text
    from ..localise.budget import parse_size

    r = request
    if r.prompt is not None and r.prompt_file is not None:
        raise BadInputError("give --prompt or --prompt-file, not both", hint="keep one of them")
    text = fs.read_text(r.prompt_file, what="--prompt-file", max_bytes=1 << 20) if r.prompt_file else (r.prompt or "Hello")
    if r.target_text_file is not None and r.target_text is not None:
        raise BadInputError("give --target-text or --target-text-file, not both", hint="keep one of them")
    target_text = (fs.read_text(r.target_text_file, what="--target-text-file", max_bytes=8 << 20) if r.target_text_file
                   else r.target_text)
    device = (DeviceTextTarget(serial=r.serial, model_dir=r.device_model_dir, config=r.device_config, llm_demo=r.llm_demo,
                               lib_dir=r.lib_dir, cpu_config=r.device_cpu_config, logits_diff_tool=r.llm_logits_diff)
              if r.device_model_dir else None)
    if r.device_logits_diff and device is None:
        raise BadInputError("--device-logits-diff needs --device-model-dir", hint="name the phone folder with both configs")
    engine_request = text_models.LlmTextRequest(
        export_dir=r.export_dir, prompt=text.strip() or "Hello", max_new_tokens=r.max_new_tokens,
        out=str(out_dir(r, r.out)), target_export=r.target_export, target_text=target_text,
        target_logits=r.target_logits, device=device, device_logits_diff=r.device_logits_diff, image=r.image,
        also_text_only=r.also_text_only, max_memory=parse_size(r.max_memory) if r.max_memory else None)
    return run_llm_text(engine_request, progress=progress)


def run(request: rq.RunRequest, progress: Progress) -> RunModelResult:
    from ..device_ops import run_model

    options = engine_options(request.options, request.extra_options, target=request.target, serial=request.serial,
                             adb=request.adb)
    return run_model(request.model, target=request.target, out=out_dir(request, request.out), forward=request.forward,
                     precision=request.precision, testdir=request.testdir, baseline=request.baseline,
                     inputs=request.inputs, shapes=request.shapes, seed=request.seed, options=options,
                     force=request.force, timeout=request.timeout, progress=progress)


def testdir(request: rq.TestDirRequest, progress: Progress) -> TestDirInfo:
    from ..device_ops import make_testdir

    return make_testdir(request.out, baseline=request.baseline, model=request.model, inputs=request.inputs,
                        shapes=request.shapes, seed=request.seed, shape_mutable=request.shape_mutable,
                        force=request.force)


def toggle_shape_mutable(request: rq.ToggleShapeMutableRequest, progress: Progress) -> ToggleResult:
    from ..mnn.testdir import toggle_shape_mutable as toggle

    return toggle(request.test_dir, request.value)


def import_dump(request: rq.ImportDumpRequest, progress: Progress) -> ImportResult:
    from ..device_ops import import_dump as run_import

    return run_import(request.dump_dir, out=request.out, model=request.model, execution=request.execution,
                      reference=request.reference, force=request.force, progress=progress)


def devices(request: rq.DevicesRequest, progress: Progress) -> DevicesResult:
    from ..device_ops import list_devices

    return list_devices(adb=request.adb, timeout=request.timeout)


def probe_device(request: rq.ProbeDeviceRequest, progress: Progress) -> ProbeResult:
    from ..device_ops import probe

    with progress.stage("probe", total=None, message="probing the phone"):
        result: ProbeResult = probe(serial=request.serial, adb=request.adb, mnn_dir=request.mnn_dir, mode=request.mode,
                                    qnn_sdk=request.qnn_sdk, mnn_build=request.mnn_build, ndk=request.ndk,
                                    timeout=request.timeout)
    return result


def case_add(request: rq.CaseAddRequest, progress: Progress) -> CaseFile:
    from pydantic import ValidationError

    from ..triage.cases import CaseRecord, append_case

    try:
        record = CaseRecord(category=request.category, match=request.match, cause=request.cause, fix=request.fix,
                            source=request.source)
    except ValidationError as e:
        first = e.errors()[0]
        raise BadInputError(f"bad case: {first['loc'][0] if first['loc'] else ''} {first['msg']}",
                            hint="see `qnn-debug case-add --help`") from None
    return append_case(request.cases, record)


def fix(request: rq.FixRequest, progress: Progress) -> FixResult:
    from ..fix import run_fix

    host = engine_options(request.options, None, target="host", serial=None, adb=None) if request.options else None
    return run_fix(request.result, out_dir(request, request.out), model=request.model, input_range=request.input_range,
                   test_dir=request.test_dir, soc_model=request.soc, timeout=request.timeout, force=request.force,
                   cases=request.cases, host_options=host, progress=progress, op=request.op)
