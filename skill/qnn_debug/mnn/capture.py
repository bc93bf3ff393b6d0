"""Turn a :class:`~qnn_debug.targets.DumpRequest` into a ModuleBasic run of MNN's QNN backend and a run dir.

Shared by the ``device`` and ``host`` targets, which only differ in their executor. Two paths:

- **offline** (default when a dump is possible): the source ``.mnn`` is converted with
  ``MNN2QNNModel --dump_intermediate_outputs`` (or a prebuilt debug wrapper is given), run with forward
  type 0 as MNN's docs say, and the QNN dump is imported with ``t<N>`` mapped through the *source* model;
- **online**: the ``.mnn`` runs with forward type 5 (``shapeMutable`` false, which QNN online needs).
  ModuleBasic never sets ``MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS``, so only the final outputs are captured,
  read from ModuleBasic's own ``output/output.mnn``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from .. import fs
from ..errors import BadInputError
from ..progress import Progress
from ..runstore import InputInfo, Run, RunRecord, RunWriter, TensorSpec, atomic_write_text, sha256_arrays
from ..targets import DumpRequest
from .dump_reader import import_mnn_dump, model_info
from .model_reader import MnnModel, read_mnn_constants, read_mnn_model
from .modulebasic import precision_value
from .runner import Executor, ModuleBasicRun, require_success, run_module_basic
from .testdir import load_inputs, read_testdir
from .testdir_builder import write_testdir

Mode = Literal["auto", "online", "offline"]
OFFLINE_HINT = "use the offline path: --option mnn2qnn=... --option qnn_sdk=..."  # where every tensor comes from
CONVERTED_DIR = "mnn2qnn"  # inside the run dir: the debug wrapper .mnn and its context .bin
COMMON_OPTIONS = {"mode", "source_model", "plugin_model", "mnn2qnn", "qnn_sdk", "testdir", "baseline", "forward",
                  "mnn_precision", "keep", "loops", "threads", "runner"}


class CaptureOptions(BaseModel):
    """Target options shared by device and host (``--option key=value``)."""

    mode: Mode = "auto"
    source_model: Path | None = None  # the .mnn given to MNN2QNNModel, when MODEL is its wrapper
    plugin_model: Path | None = None  # a prebuilt <base>_<soc>_<arch>.mnn (its .bin beside it)
    mnn2qnn: Path | None = None  # MNN2QNNModel executable (x86_64 Linux host)
    qnn_sdk: Path | None = None
    testdir: Path | None = None  # run this test dir instead of making one
    baseline: Path | None = None  # put this baseline's reference outputs in the test dir
    forward: int | None = None
    mnn_precision: str | None = None  # low/high/normal; default from the request's precision
    keep: bool = False  # keep the run directory on the target
    loops: int = 0
    threads: int = 1
    # host: what runs an online dump: our own runner (every tensor) or ModuleBasic (outputs, ModuleBasic's check;
    # what `qnn-debug run` asks for); auto = our runner for dumps
    runner: Literal["auto", "own", "modulebasic"] = "auto"


def split_options(options: dict[str, str], own: set[str]) -> tuple[CaptureOptions, dict[str, str]]:
    """Common options → CaptureOptions; the target's own keys are returned; anything else is refused."""
    unknown = sorted(set(options) - COMMON_OPTIONS - own)
    if unknown:
        raise BadInputError(f"unknown target option(s): {', '.join(unknown)}",
                            hint="allowed: " + ", ".join(sorted(COMMON_OPTIONS | own)))
    common: dict[str, Any] = {k: v for k, v in options.items() if k in COMMON_OPTIONS}
    if "keep" in common:
        common["keep"] = str(common["keep"]).lower() in ("1", "true", "yes")
    if "forward" in common:
        from .modulebasic import forward_type

        common["forward"] = forward_type(common["forward"])
    try:
        parsed = CaptureOptions.model_validate(common)
    except ValueError as e:
        raise BadInputError(f"invalid target option: {e}", hint="check the --option values") from None
    return parsed, {k: v for k, v in options.items() if k in own}


class Plan(BaseModel):
    """What will run: the model shipped to the target, the model that names tensors, forward type."""

    mode: Literal["online", "offline"]
    run_model: Path
    companions: list[Path]
    source: Path
    forward: int
    precision: int
    convert: bool = False


def plan(model_path: Path, opts: CaptureOptions, precision: str) -> tuple[Plan, MnnModel]:
    if model_path.suffix.lower() != ".mnn":
        raise BadInputError(f"{model_path.name} is not an .mnn model",
                            hint="device and host targets run MNN models; convert ONNX with `qnn-debug baseline` first")
    model = read_mnn_model(model_path)
    mnn_precision = precision_value(opts.mnn_precision or {"fp32": "high"}.get(precision, "low"))
    if model.is_qnn_plugin_model:
        if opts.source_model is None:
            raise BadInputError(f"{model_path.name} is an MNN2QNNModel wrapper; its dump names tensors of the source model",
                                hint="add --option source_model=<the .mnn given to MNN2QNNModel>")
        source = read_mnn_model(opts.source_model)
        return Plan(mode="offline", run_model=model_path, companions=_binary(model_path, model), source=opts.source_model,
                    forward=opts.forward if opts.forward is not None else 0, precision=mnn_precision), source
    if opts.plugin_model is not None:
        wrapper = read_mnn_model(opts.plugin_model)
        if not wrapper.is_qnn_plugin_model:
            raise BadInputError(f"{opts.plugin_model} is not an MNN2QNNModel wrapper (no QNN plugin op)",
                                hint="pass the <base>_<soc>_<arch>.mnn MNN2QNNModel wrote")
        return Plan(mode="offline", run_model=opts.plugin_model, companions=_binary(opts.plugin_model, wrapper),
                    source=model_path, forward=opts.forward if opts.forward is not None else 0,
                    precision=mnn_precision), model
    offline = opts.mode == "offline" or (opts.mode == "auto" and opts.mnn2qnn is not None)
    if offline:
        if opts.mnn2qnn is None or opts.qnn_sdk is None:
            raise BadInputError("an offline (dumping) run needs MNN2QNNModel and the QNN SDK",
                                hint="add --option mnn2qnn=<path to MNN2QNNModel> --option qnn_sdk=<QNN SDK root>, "
                                "or --option plugin_model=<prebuilt debug .mnn>, or --option mode=online")
        return Plan(mode="offline", run_model=model_path, companions=[], source=model_path, convert=True,
                    forward=opts.forward if opts.forward is not None else 0, precision=mnn_precision), model
    return Plan(mode="online", run_model=model_path, companions=[], source=model_path,
                forward=opts.forward if opts.forward is not None else 5, precision=mnn_precision), model


def _binary(wrapper_path: Path, wrapper: MnnModel) -> list[Path]:
    """The context binary a wrapper loads (``path`` attribute, resolved beside the model)."""
    name = wrapper.plugin.binary_path if wrapper.plugin else None
    if not name:
        raise BadInputError(f"{wrapper_path.name} names no context binary", hint="regenerate it with MNN2QNNModel")
    binary = wrapper_path.parent / Path(name).name
    if not binary.is_file():
        raise BadInputError(f"{wrapper_path.name} needs {binary.name} beside it", hint="copy the .bin MNN2QNNModel wrote next to it")
    return [binary]


def capture(request: DumpRequest, executor: Executor, opts: CaptureOptions, progress: Progress, *, target: str,
            soc_model: int, htp_arch: int, warnings: list[str] | None = None, extra: dict[str, Any] | None = None,
            dump_hint: str = OFFLINE_HINT) -> Run:
    """Run the request's model through ModuleBasic on ``executor`` and write the run directory."""
    from ..inputs import prepare_inputs

    p, source = plan(Path(request.model), opts, request.precision)
    notes = list(warnings or [])
    with fs.scratch("qnn-debug-mnn-") as tmp:
        scratch = Path(tmp)
        if opts.testdir is not None:
            info = read_testdir(opts.testdir)
            arrays = load_inputs(opts.testdir)
            testdir = opts.testdir
            input_info = InputInfo(sha256=sha256_arrays(arrays), source=f"testdir:{opts.testdir.name}",
                                   names=list(arrays), shapes={k: list(v.shape) for k, v in arrays.items()})
            if p.mode == "online" and info.shape_mutable is not False:
                notes.append("test dir has no \"shapeMutable\": false — QNN online runs then skip copying inputs "
                             "(fix with `qnn-debug toggle-shape-mutable DIR --value false`)")
        else:
            specs = [TensorSpec(name=i.name, shape=[d if d > 0 else None for d in i.shape], dtype=i.dtype) for i in source.inputs]
            prepared = prepare_inputs(specs, inputs=request.inputs, shapes=request.shapes, seed=request.seed)
            arrays, input_info = prepared.arrays, prepared.info
            notes += prepared.warnings
            references = _baseline_references(opts.baseline, source.output_names)
            testdir = scratch / "testdir"
            write_testdir(testdir, arrays, source.output_names, references=references,
                          shape_mutable=False if p.mode == "online" else None)
        run_model, companions, conversion = p.run_model, list(p.companions), None
        if p.convert:
            conversion = _convert(p, opts, arrays, source, soc_model, htp_arch, scratch, request.timeout, progress)
            run_model, companions = Path(conversion["mnn"]), [Path(conversion["bin"])]
        mb = run_module_basic(executor, model=run_model, companions=companions, testdir=testdir, local_dir=scratch / "result",
                              forward=p.forward, precision=p.precision, loops=opts.loops, threads=opts.threads,
                              timeout=request.timeout, keep=opts.keep, progress=progress)
        require_success(mb, out=request.out)
        if mb.report.status == "failed":
            notes.append(f"ModuleBasic: {mb.report.reason}")
        if p.mode == "offline" and mb.dump_dir is None:
            notes.append("the offline run wrote no QNN dump: was the wrapper made with --dump_intermediate_outputs?")
        if mb.dump_dir is not None and (mb.report.qnn_errors or mb.report.graph_execute_failed):
            notes.append("QNN reported errors during the run: the offline path still dumps a failed execution, "
                         "so these tensors may be uninitialised buffers")
        kept: list[Path] = []
        if conversion is not None:  # keep the debug model beside the run: it can be re-run or pushed by hand
            kept = [run_model, *companions]
            conversion["mnn"], conversion["bin"] = (f"{CONVERTED_DIR}/{f.name}" for f in kept)
        details = {"mode": p.mode, "forward_type": p.forward, "mnn_precision": p.precision,
                   "modulebasic": mb.report.model_dump(mode="json"), "command": mb.command, "target_dir": mb.target_dir,
                   "run_model": run_model.name, **({"mnn2qnn": conversion} if conversion else {}), **(extra or {})}
        if mb.dump_dir is not None:
            run = import_mnn_dump(mb.dump_dir, mnn_model=source, out=request.out, force=request.force, input_info=input_info,
                                  target=target, soc_model=soc_model, htp_arch=htp_arch, warnings=notes, extra=details,
                                  input_arrays=arrays, progress=progress)
        else:
            run = _outputs_run(mb, source, arrays, input_info, request, target, soc_model, htp_arch, notes, details,
                               dump_hint)
        atomic_write_text(run.dir / "logs" / "modulebasic.log", mb.log)
        for f in kept:
            (run.dir / CONVERTED_DIR).mkdir(exist_ok=True)
            shutil.move(str(f), run.dir / CONVERTED_DIR / f.name)
        return run


def _baseline_references(baseline: Path | None, outputs: list[str]) -> dict[str, np.ndarray] | None:
    if baseline is None:
        return None
    from ..runstore import baseline_reference

    ref = baseline_reference(baseline)
    return {n: np.asarray(ref.array(n)) for n in outputs if ref.has(n)}


def _convert(p: Plan, opts: CaptureOptions, arrays: dict[str, np.ndarray], source: MnnModel, soc: int, arch: int,
             scratch: Path, timeout: float, progress: Progress) -> dict[str, Any]:
    from .mnn2qnn import run_mnn2qnn, shape_string

    assert opts.mnn2qnn is not None and opts.qnn_sdk is not None
    shapes = [shape_string({k: list(v.shape) for k, v in arrays.items()}, [i.name for i in source.inputs])]
    with progress.stage("MNN2QNNModel", total=None, message="MNN2QNNModel: building the debug QNN model"):
        result = run_mnn2qnn(opts.mnn2qnn, qnn_sdk=opts.qnn_sdk, source=p.source, output_dir=scratch / "converted",
                             soc_id=soc, htp_arch=arch, shapes=shapes, dump=True, timeout=timeout, scratch=scratch)
    data = result.model_dump(mode="json", exclude={"log"})
    return data


def _outputs_run(mb: ModuleBasicRun, source: MnnModel, arrays: dict[str, np.ndarray], input_info: InputInfo,
                 request: DumpRequest, target: str, soc: int, arch: int, notes: list[str], details: dict[str, Any],
                 dump_hint: str) -> Run:
    """An online run: graph inputs plus the final outputs ModuleBasic saved in output/output.mnn."""
    saved_path = mb.local_dir / "output" / "output.mnn"
    saved: dict[str, Any] = {}
    if saved_path.is_file():
        try:
            saved = read_mnn_constants(saved_path)
        except BadInputError as e:
            notes = [*notes, f"output/output.mnn unreadable ({e.message}); outputs taken from output/*.txt"]
    notes = [*notes, f"ModuleBasic cannot switch on QNN's intermediate dump: only the final outputs were captured "
             f"({dump_hint})"]
    record = RunRecord(role="target", target=target, precision=request.precision, model=model_info(source),
                       inputs=input_info, soc_model=soc, htp_arch=arch, outputs=[], warnings=notes, extra=details)
    writer = RunWriter(request.out, record, force=request.force)
    for name, arr in arrays.items():
        writer.add_tensor(name, arr, kind="input", position=-1, label="graph input as fed")
    for name in source.output_names:
        value = saved.get(name)
        if value is None and name in mb.outputs:
            value = mb.outputs[name]
            notes.append(f"{name}: shape unknown (no output.mnn), stored flat from output/*.txt")
        if value is None:
            notes.append(f"{name}: ModuleBasic wrote no value")
            continue
        index = source.tensor_index(name)
        op = source.producer(index) if index is not None else None
        writer.add_tensor(name, np.asarray(value, dtype=np.float32), kind="output", op=op.name if op else None,
                          op_type=op.type_name if op else None, position=op.position if op else len(source.ops),
                          target_name=name, layout_note="MNN default layout (ModuleBasic converts outputs)")
        record.outputs.append(name)
    record.warnings = notes
    return writer.finish()
