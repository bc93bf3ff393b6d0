"""``diagnose``: baseline, one all-tensor dump and the comparison in one go.

Layout of ``out``::

    inputs.npz   the seeded inputs both runs used (with --inputs, the runs read the user's .npz or MNN test
                 dir instead; baseline/inputs.npz always holds the arrays)
    baseline/    fp32 reference, fp16 floor, MNN CPU gate (see ``qnn_debug.baseline``)
    <target>/    the all-tensor QNN run (e.g. ``htp-sim/``)
    report/      compare.md, compare.json, error_by_position.png

The baseline and the dump only share the inputs, so they run side by side (each mostly waits on its
own worker process); the comparison starts when both are done.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import fs
from .compare.schema import CompareResult
from .diagnose_models import DiagnoseResult
from .errors import BadInputError
from .localise.fallback import FallbackReport
from .mnn.soc import DEFAULT_SOC
from .progress import NULL_PROGRESS, Progress
from .targets import DEFAULT_TARGET, Precision

if TYPE_CHECKING:
    from .parallel import ParallelOptions
    from .runstore import TensorSpec

INPUTS_FILE = "inputs.npz"
BASELINE_DIR = "baseline"
REPORT_DIR = "report"


def diagnose(model: str | os.PathLike[str], out: str | os.PathLike[str], *, inputs: str | os.PathLike[str] | None = None,
             shapes: dict[str, list[int]] | None = None, target: str = DEFAULT_TARGET, precision: Precision = "fp16",
             soc_model: int = DEFAULT_SOC, htp_arch: int | None = None, seed: int = 0, force: bool = False,
             mnn_gate: bool = True, target_options: dict[str, str] | None = None, timeout: float = 1800.0,
             reference_model: str | os.PathLike[str] | None = None, max_memory: int | None = None,
             mnn_model: str | os.PathLike[str] | None = None, workers: int | None = None,
             cluster: str | None = None, progress: Progress = NULL_PROGRESS) -> DiagnoseResult:
    """Diagnose ``model`` on ``target``. ``reference_model`` (default: ``model``) is what the baseline runs:
    pass the original model there and an edited one as ``model`` to diagnose an injected bug. ``mnn_model``
    (targets that run MNN models): the user's own ``.mnn`` of the ONNX ``model`` runs on the target, and the
    baseline gates it against ONNX Runtime (reference and floor still come from the ONNX).

    On a target whose marking is watched (the simulator), a model whose weights are external and do not fit one
    session within ``max_memory`` (bytes per process; default from the machine) is not dumped whole: its baseline
    is built piece by piece and it is marked in chunks, piece by piece (:mod:`qnn_debug.localise.stream_baseline`,
    :mod:`qnn_debug.localise.chunked`); its simulator sessions then run as jobs, ``workers`` at once on this machine
    (None: every core when the model is large enough to pay for the engine's start-up) or on the Ray ``cluster``."""
    from .baseline import run_baseline
    from .compare.pipeline import compare_paths
    from .dump import run_dump
    from .targets import DumpRequest
    from .targets import target as get_target

    caps = get_target(target).capabilities
    watch_marking = caps.observer_effect  # marking may break or change its graph
    model_path, base_model = Path(model), Path(reference_model or model)
    if mnn_model is not None:
        if not caps.runs_mnn:
            raise BadInputError(f"--mnn-model applies to targets that run MNN models; {target} runs the ONNX model",
                                hint="drop --mnn-model, or choose --target host or device")
        if model_path.suffix.lower() != ".onnx":
            raise BadInputError("--mnn-model goes with an .onnx model (the reference and floor come from it)",
                                hint="pass the .onnx as MODEL and your .mnn as --mnn-model")
        model_path = fs.check(mnn_model, what="--mnn-model", kind="file")
    out_dir = _prepare_out(Path(out), force)
    started = time.monotonic()
    inputs_path, inputs_note = _inputs(base_model, out_dir, inputs, shapes, seed)
    run_dir = out_dir / target
    request = DumpRequest(model=model_path, out=run_dir, target=target, precision=precision,
                          soc_model=soc_model, htp_arch=htp_arch, inputs=inputs_path, shapes=shapes or {},
                          seed=seed, force=force, timeout=timeout, options=target_options or {})
    timings: dict[str, float] = {}
    if watch_marking:
        from .localise.bisect_stream import streams
        from .localise.budget import default_budget

        budget = max_memory or default_budget()
        if streams(model_path, budget) or streams(base_model, budget):
            from .parallel import ParallelOptions

            return _diagnose_streamed(model_path, base_model, out_dir, inputs_path, shapes, seed, budget,
                                      soc_model, htp_arch, target_options or {}, timeout, force, progress, started,
                                      ParallelOptions(workers=workers, cluster=cluster))

    def timed(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            timings[f"{name}_s"] = round(time.monotonic() - t0, 3)

    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="qnn-debug-diagnose") as pool:
        base_future = pool.submit(timed, "baseline", run_baseline, base_model, out_dir / BASELINE_DIR,
                                  inputs=inputs_path, shapes=shapes, seed=seed, force=force, progress=progress,
                                  mnn_gate=mnn_gate, mnn_model=mnn_model)
        dump_future = pool.submit(timed, "dump", run_dump, request, progress)
        pool.submit(_warm_imports)  # the comparison's heavy imports, while the target runs
        base_error = base_future.exception()
        dump_error = dump_future.exception()
    if base_error is not None:
        raise base_error
    from .localise import fallback as fb

    reason = None
    if dump_error is not None:
        if not watch_marking or not fb.marking_broke(dump_error):
            raise dump_error
        reason = f"the all-tensor graph did not build: {getattr(dump_error, 'message', dump_error)}"
    baseline = base_future.result()
    if reason is None and watch_marking:
        from .runstore import load_run

        reason = fb.observer_lie(load_run(run_dir), out_dir / BASELINE_DIR)
    report: FallbackReport | None = None
    if reason is None:
        result: CompareResult | None = timed("compare", compare_paths, out_dir / BASELINE_DIR, run_dir,
                                             report_dir=out_dir / REPORT_DIR, progress=progress)
    else:
        result, report = timed("fallback", fb.localise_without_full_dump, model_path, base_model, out_dir,
                               out_dir / BASELINE_DIR, inputs_path, reason, soc_model=soc_model, htp_arch=htp_arch,
                               options=target_options or {}, timeout=timeout, force=force, progress=progress)
    timings["total_s"] = round(time.monotonic() - started, 3)
    return DiagnoseResult(out=str(out_dir), baseline=str(out_dir / BASELINE_DIR), target_run=str(run_dir),
                          report_dir=str(out_dir / REPORT_DIR), baseline_trusted=baseline.report.trusted,
                          baseline_sentence=baseline.report.sentence, inputs_note=inputs_note, compare=result, timings=timings,
                          method=report.method if report else "full_dump", fallback=report)


def _diagnose_streamed(model: Path, base_model: Path, out_dir: Path, inputs: Path, shapes: dict[str, list[int]] | None,
                       seed: int, budget: int, soc_model: int, htp_arch: int | None,
                       options: dict[str, str], timeout: float, force: bool, progress: Progress,
                       started: float, parallel: ParallelOptions) -> DiagnoseResult:
    """The baseline piece by piece, then chunked marking piece by piece (bisection if that lies): no process holds
    more than one piece of the model."""
    from .baseline import load_baseline
    from .localise import fallback as fb
    from .localise.external import open_lazy, weight_bytes
    from .localise.stream_baseline import stream_baseline

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    stream_baseline(base_model, out_dir / BASELINE_DIR, inputs=inputs, shapes=shapes, seed=seed, budget=budget,
                    force=force, progress=progress)
    timings["baseline_s"] = round(time.monotonic() - t0, 3)
    from .localise.budget import GIB, PROCESS_BASE, SIM_FACTOR

    weights = weight_bytes(open_lazy(model).model)
    reason = (f"one simulator session of the whole model ({weights / GIB:.2f} GiB of weights) needs about "
              f"{(PROCESS_BASE + SIM_FACTOR * weights) / GIB:.1f} GiB, over the memory budget of {budget / GIB:.2f} "
              "GiB, so it runs piece by piece")
    t0 = time.monotonic()
    result, report = fb.localise_without_full_dump(model, base_model, out_dir, out_dir / BASELINE_DIR, inputs, reason,
                                                   soc_model=soc_model, htp_arch=htp_arch, options=options,
                                                   timeout=timeout, force=force, progress=progress, max_memory=budget,
                                                   streamed=True, parallel=parallel)
    timings["fallback_s"] = round(time.monotonic() - t0, 3)
    timings["total_s"] = round(time.monotonic() - started, 3)
    baseline = load_baseline(out_dir / BASELINE_DIR)
    run_dir = out_dir / (fb.CHUNKED_DIR if report.method == "chunked_dump" else fb.BISECT_DIR)
    if report.method == "chunked_dump":
        from .runstore import load_run

        engine = load_run(run_dir).record.extra.get("parallel") or {}
        timings.update({f"htp_sim_{k}": float(v) for k, v in engine.items() if isinstance(v, int | float)})
    return DiagnoseResult(out=str(out_dir), baseline=str(out_dir / BASELINE_DIR), target_run=str(run_dir),
                          report_dir=str(out_dir / REPORT_DIR), baseline_trusted=baseline.report.trusted,
                          baseline_sentence=baseline.report.sentence, compare=result, timings=timings,
                          method=report.method, fallback=report)


def _warm_imports() -> None:
    """Import what the comparison needs (ONNX Runtime, matplotlib) while we wait for the target anyway."""
    import contextlib

    with contextlib.suppress(ImportError):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
        import onnxruntime  # noqa: F401


def _inputs(model: Path, out: Path, inputs: str | os.PathLike[str] | None, shapes: dict[str, list[int]] | None,
            seed: int) -> tuple[Path, str | None]:
    """The inputs both runs get: the user's (an ``.npz`` or an MNN test dir, loaded the way ``baseline`` and ``dump``
    load them) or seeded data saved as ``out/inputs.npz``.

    The user's inputs are checked against the model here, before either run starts, so a bad ``--inputs`` is one
    clear error instead of two; they are then passed on as given, so both runs record where they came from.
    Returns the path and, for generated data, what range it follows and what it cannot show."""
    from .inputs import prepare_inputs, save_npz

    if inputs is not None:
        prepare_inputs(_input_specs(model), inputs=inputs, shapes=shapes, seed=seed)
        return Path(inputs).resolve(), None
    if model.suffix.lower() != ".onnx":
        raise BadInputError(f"diagnose makes inputs from ONNX models; {model.name} is not one",
                            hint="pass --inputs FILE.npz keyed by input name, or an MNN test dir")
    from .onnx_graph import graph_inputs, load_onnx

    graph = load_onnx(model, load_external_data=False)  # the first ops' constants are small; weights stay on disk
    prepared = prepare_inputs(graph_inputs(graph), shapes=shapes, seed=seed, model=graph)
    return save_npz(out / INPUTS_FILE, prepared.arrays).resolve(), prepared.info.note


def _input_specs(model: Path) -> list[TensorSpec]:
    """The model's declared inputs (ONNX graph inputs, or an .mnn model's inputs)."""
    if model.suffix.lower() == ".mnn":
        from .mnn.model_reader import read_mnn_model
        from .targets.mnn_cpu import mnn_io

        specs, _ = mnn_io(read_mnn_model(model))
        return specs
    from .onnx_graph import graph_inputs, load_onnx

    return graph_inputs(load_onnx(model, load_external_data=False))  # the inputs need no weights


def _prepare_out(out: Path, force: bool) -> Path:
    """An empty directory, or (with ``force``) one a previous diagnose wrote; never anything else."""
    if out.exists() and not out.is_dir():
        raise BadInputError(f"output path {out} exists and is not a directory", hint="choose another --out")
    if out.exists() and any(out.iterdir()):
        ours = (out / BASELINE_DIR).is_dir() or (out / REPORT_DIR).is_dir() or (out / INPUTS_FILE).exists()
        if not force:
            raise BadInputError(f"output directory {out} is not empty",
                                hint="choose a new --out, or pass --force to replace a previous diagnosis there")
        if not ours:
            raise BadInputError(f"refusing to reuse {out}: it does not look like a qnn-debug diagnosis",
                                hint="choose a new --out")
    return fs.make_dirs(out, what="output directory")
