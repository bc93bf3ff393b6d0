"""Every tensor of MNN's online QNN path on the host: our runner (:mod:`.host_runner`) with QNN's dump on.

The model is an ``.mnn`` or an ``.onnx`` (converted here by the MNN wheel's converter, in a worker, as the
baseline converts it). Inputs come from the request (``--inputs``, an MNN test dir, or seeded) exactly as the
ModuleBasic path prepares them; the dump folder (``manifest_000000.tsv`` + ``execution_*_tensor_*.raw``) is
imported with the ``t<N>`` names mapped through the ``.mnn``. MNN's printed words are kept in
``logs/mnn_runner.log``; a refused op (``Don't support type N``) is an
:class:`~qnn_debug.errors.UnsupportedOnTargetError` naming it, not a partial dump of a graph that fell back to CPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .. import fs
from ..errors import BadInputError, TargetError, UnsupportedOnTargetError
from ..progress import Progress
from ..runstore import InputInfo, Run, TensorSpec, atomic_write_text, sha256_arrays
from ..targets import DumpRequest
from .host_runner import MnnBuild, RunnerOutput, build_runner, run_runner
from .model_reader import MnnModel, read_mnn_model
from .refusals import read_tool_output, refusal_hint, refusal_message

CONVERT_WORKER = "qnn_debug.workers.mnn_convert_worker"
CONVERTED_MODEL = "model.mnn"  # beside the run: the .mnn that ran, when it was converted here
RUNNER_OUTPUTS = "runner_outputs.npz"  # the outputs as the application reads them (MNN's default layout)
RUNNER_LOG = "mnn_runner.log"


def convert_onnx(onnx_path: Path, dst: Path, *, log: Path, timeout: float) -> Path:
    """The ONNX model through the MNN wheel's converter (in a worker: importing MNN prints to fd 1)."""
    from ..workers import run_worker

    run_worker(CONVERT_WORKER, {"src": str(onnx_path), "dst": str(dst)}, log_path=log, timeout=timeout,
               what="MNN converter")
    return dst


def online_dump(request: DumpRequest, build: MnnBuild, *, env: dict[str, str], testdir: Path | None,
                progress: Progress, soc_model: int, htp_arch: int, notes: list[str],
                extra: dict[str, Any]) -> Run:
    """Run the request's model once on MNN's QNN backend with the dump on, and write the run directory."""
    from ..inputs import save_npz
    from .dump_reader import import_mnn_dump

    model_path = Path(request.model)
    suffix = model_path.suffix.lower()
    if suffix not in (".mnn", ".onnx"):
        raise BadInputError(f"{model_path.name} is neither an .mnn nor an .onnx model",
                            hint="pass the .onnx model (converted here by MNN's converter) or its .mnn")
    with progress.stage("host: runner", total=None, message="host: building the MNN runner (once per build)"):
        exe = build_runner(build)  # first: a build it cannot compile against fails before any conversion
    with fs.scratch("qnn-debug-host-") as tmp:
        work = Path(tmp)
        mnn_path = model_path
        if suffix == ".onnx":
            with progress.stage("host: MNN converter", total=None, message="host: converting the ONNX model to .mnn"):
                mnn_path = convert_onnx(model_path, work / CONVERTED_MODEL, log=work / "convert.log",
                                        timeout=request.timeout)
        source = read_mnn_model(mnn_path)
        if source.is_qnn_plugin_model:
            raise BadInputError(f"{model_path.name} is an MNN2QNNModel wrapper: the online runner takes the source .mnn",
                                hint="pass the source .mnn, or run the wrapper with --option source_model=<source .mnn>"
                                     " --option mode=offline")
        arrays, info, warned = _inputs(request, source, testdir)
        notes = [*notes, *warned]
        with progress.stage("host: MNN QNN", total=None, message="host: one forward pass on MNN's QNN backend"):
            result, values = run_runner(exe, mnn_path, arrays, source.output_names, work / "run", env=env,
                                        timeout=request.timeout)
        _check(result, model_path, request.out)
        assert result.dump_dir is not None
        details = {**extra, "mode": "online", "forward_type": 5, "mnn_precision": 2, "runner": "qnn-debug-mnn-runner",
                   "command": [Path(result.command[0]).name, *result.command[1:2]],
                   "runner_outputs": result.outputs,
                   **({"converted_from": str(model_path.absolute()), "converted_model": CONVERTED_MODEL}
                      if mnn_path != model_path else {})}
        run = import_mnn_dump(result.dump_dir, mnn_model=source, out=request.out, force=request.force,
                              input_info=info, target=request.target, soc_model=soc_model, htp_arch=htp_arch,
                              warnings=notes, extra=details, input_arrays=arrays, progress=progress)
        atomic_write_text(run.dir / "logs" / RUNNER_LOG, result.log)
        if values:
            save_npz(run.dir / RUNNER_OUTPUTS, values)
        if mnn_path != model_path:
            shutil.copyfile(mnn_path, run.dir / CONVERTED_MODEL)
        return run


def _inputs(request: DumpRequest, source: MnnModel, testdir: Path | None
            ) -> tuple[dict[str, np.ndarray], InputInfo, list[str]]:
    """The inputs the ModuleBasic path would feed: an MNN test dir's, the request's ``.npz``, or seeded."""
    from ..inputs import prepare_inputs
    from .testdir import load_inputs

    if testdir is not None:
        arrays = load_inputs(testdir)
        return arrays, InputInfo(sha256=sha256_arrays(arrays), source=f"testdir:{testdir.name}", names=list(arrays),
                                 shapes={k: list(v.shape) for k, v in arrays.items()}), []
    specs = [TensorSpec(name=i.name, shape=[d if d > 0 else None for d in i.shape], dtype=i.dtype) for i in source.inputs]
    prepared = prepare_inputs(specs, inputs=request.inputs, shapes=request.shapes, seed=request.seed)
    return prepared.arrays, prepared.info, list(prepared.warnings)


def _check(result: RunnerOutput, model: Path, out: Path | None = None) -> None:
    """MNN's own words for a run that did not give a dump: a refused op, a failed load or forward, a crash. The
    full log of a failed run is kept at ``<out>/logs/mnn_runner.log`` and the message names it."""
    from ..runstore import keep_failed_log

    facts = read_tool_output(result.log)
    tail = "\n".join(result.log.strip().splitlines()[-20:])
    details: dict[str, Any] = {"log_tail": tail, "returncode": result.returncode}
    failed = (refusal_message(facts, "MNN (host, online)") or result.returncode != 0 or result.dump_dir is None
              or not any(result.dump_dir.glob("manifest_*.tsv")))
    kept = (keep_failed_log(out, RUNNER_LOG, result.log, message="MNN's QNN backend on the host failed",
                            command=result.command) if failed and out is not None else None)
    if kept is not None:
        details["log"] = str(kept)
    at = f" (MNN's log: {kept})" if kept else ""
    refused = refusal_message(facts, "MNN (host, online)")
    if refused:
        raise UnsupportedOnTargetError(f"{refused}; {model.name} cannot run whole on QNN{at}",
                                       hint=refusal_hint(facts),
                                       details={**details, "refusals": [r.model_dump() for r in facts.refusals]})
    if result.returncode != 0:
        what = {3: "the model did not load on MNN's QNN backend", 4: "the forward pass returned no outputs",
                2: "the runner refused its inputs"}.get(result.returncode)
        if result.returncode < 0:
            what = f"the runner crashed (signal {-result.returncode})"
        raise TargetError(f"MNN's QNN backend on the host failed: {what or f'exit status {result.returncode}'}"
                          + (f"; {facts.resize_failed}" if facts.resize_failed else "") + at,
                          hint=f"read {'the log at ' + str(kept) if kept else 'details.log_tail'}; `qnn-debug triage` "
                               "on that text explains QNN error codes",
                          details=details)
    if result.dump_dir is None or not any(result.dump_dir.glob("manifest_*.tsv")):
        raise TargetError(f"MNN's QNN backend ran but wrote no intermediate dump (no manifest_*.tsv){at}",
                          hint="the build's QNN backend may predate MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS: rebuild it from "
                               "the MNN sources whose headers define it",
                          details=details)
