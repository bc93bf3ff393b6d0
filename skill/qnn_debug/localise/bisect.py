"""``qnn-debug bisect``: find the first failing op by truncating the model, when no dump is possible.

Each probe cuts the model after one op (the cut's *frontier* becomes the graph outputs, see
:mod:`.cut`), runs that truncated model unmarked on the target, and judges the frontier against the
reference exactly as ``compare`` judges a tensor (beyond the fp16 floor by the jump gate = bad). A binary
search over the cut points needs about log2(N) + 1 probes.

The target decides how (its :class:`~qnn_debug.targets.base.Capabilities`, never its name):

- a target with ``own_reference`` (``device``, ``host``) brings the reference and the floor from the same
  machine with each probe (:mod:`qnn_debug.targets.mnn_probe`);
- otherwise the reference and the floor come from a baseline (ORT CPU fp32 and the fp16 floor); a target
  with ``one_session`` (``htp-sim``) runs the whole search in one process of its own, any other target is
  probed cut by cut through its ``prober``.

A model too large for one simulator session runs as a chain of pieces (:mod:`.bisect_stream`); with more than one
worker its probes run in rounds through the parallel engine (:mod:`.bisect_parallel`), with the same probes and
answer as the one-process search.

The fp16-range check needs no probe: the first tensor whose reference leaves the fp16 range (|x| > 65504)
is named from the baseline; HTP saturates there (at 131008, never inf), so it is a range problem, not a bug.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from ..compare.thresholds import Thresholds
from ..errors import BadInputError
from ..next_step import step
from ..progress import NULL_PROGRESS, Progress
from ..runstore import Run, atomic_write_text, check_output_dir
from ..targets import DEFAULT_TARGET, target
from ..targets.base import ProbeSetup, Target
from .cut import CutPoint, cut_points, truncate
from .models import BisectResult, FirstFailingOp, RangeFinding
from .probe import Probe, first_bad, judge, summarise

FP16_MAX = 65504.0
SENTINEL = 1e30  # |x| at or above this is a -inf/+inf stand-in (masks), not a value
RESULT_FILE = "bisect.json"
BASELINE_DIR = "baseline"
JOBS_DIR = "jobs"  # the parallel probes' kept results: a rerun resumes from them (never deleted by --force)


class BisectRequest(BaseModel):
    """What to bisect and where. ``reference_model`` (default ``model``) is what the reference runs:
    pass the original there and an edited copy as ``model`` to localise an injected bug."""

    model: Path
    out: Path
    target: str = DEFAULT_TARGET  # a registered target's name
    reference_model: Path | None = None
    baseline: Path | None = None  # reuse this baseline (targets without their own reference) instead of building one
    inputs: Path | None = None
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    seed: int = 0
    soc_model: int = 69
    htp_arch: int | None = None
    options: dict[str, str] = Field(default_factory=dict)
    opencl: bool = False  # targets with their own reference: also OpenCL fp16 (forward type 3) as a third opinion
    mnn_gate: bool = True
    force: bool = False
    timeout: float = 1800.0
    max_memory: int | None = None  # bytes per process; a model that does not fit one session runs piece by piece
    workers: int | None = None  # a chained bisection's probes at once (None: every core when the model is large)
    cluster: str | None = None  # a Ray cluster's address for those probes


def run_bisect(request: BisectRequest, progress: Progress = NULL_PROGRESS, *,
               thresholds: Thresholds | None = None) -> BisectResult:
    """Bisect ``request.model`` on ``request.target`` and write ``bisect.json`` into ``request.out``."""
    from ..onnx_graph import load_onnx

    started = time.monotonic()
    th = thresholds or Thresholds()
    model_path = Path(request.model)
    if model_path.suffix.lower() != ".onnx":
        raise BadInputError(f"bisect truncates ONNX graphs; {model_path.name} is not one",
                            hint="pass the .onnx the .mnn was converted from (device/host probes convert each cut)")
    ref_path = Path(request.reference_model or model_path)
    tgt = target(request.target)
    out = _prepare_out(Path(request.out), request.force)
    if request.inputs is None and request.baseline is None:  # the graph's shapes only: weights stay on disk
        request = _vl_inputs(request, load_onnx(ref_path, load_external_data=False), out)
    if tgt.capabilities.own_reference:
        result = _bisect_same_device(tgt, request, load_onnx(model_path), load_onnx(ref_path), out, th, progress)
    else:
        result = _bisect_on_baseline(tgt, request, model_path, ref_path, out, th, progress)
    result.elapsed_s = round(time.monotonic() - started, 3)
    atomic_write_text(out / RESULT_FILE, result.model_dump_json(indent=1))
    return result


def _vl_inputs(request: BisectRequest, reference: Any, out: Path) -> BisectRequest:
    """A VL vision encoder or M-RoPE decoder without inputs gets them as MNN's runtime builds them (ids, masks,
    idx/weight tensors, deepstack features), saved beside the result; other models keep seeded data."""
    from ..inputs import save_npz
    from ..llm.vl_feeds import vl_feeds

    built = vl_feeds(reference, request.shapes or None, None, request.seed)
    if built is None:
        return request
    return request.model_copy(update={"inputs": save_npz(out / "vl_inputs.npz", built)})


def _prepare_out(out: Path, force: bool) -> Path:
    def ours(p: Path) -> bool:
        return (p / RESULT_FILE).exists() or (p / BASELINE_DIR).is_dir() or (p / JOBS_DIR).is_dir()

    if check_output_dir(out, force=force, is_ours=ours, what="bisection"):
        for name in (RESULT_FILE, BASELINE_DIR, "probes"):
            entry = out / name
            if entry.is_dir():
                shutil.rmtree(entry)
            elif entry.exists():
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def judged_names(reference: Run) -> set[str]:
    """Float tensors the reference holds for ops (graph inputs excluded): what a probe can judge."""
    return {t.name for t in reference.tensors if t.kind in ("activation", "output")}


def _setup(request: BisectRequest, work: Path, progress: Progress) -> ProbeSetup:
    return ProbeSetup(work=work, soc_model=request.soc_model, htp_arch=request.htp_arch, options=request.options,
                      opencl=request.opencl, timeout=request.timeout, progress=progress)


def _bisect_on_baseline(tgt: Target, request: BisectRequest, model_path: Path, ref_path: Path, out: Path,
                        th: Thresholds, progress: Progress) -> BisectResult:
    """Reference and floor from a baseline; the target runs the cuts (in one session when it can). A model whose
    weights are external and do not fit one session within the memory budget streams (:mod:`.bisect_stream`)."""
    from ..baseline import load_baseline, run_baseline
    from ..inputs import fix_input_shapes, prepare_inputs, save_npz
    from ..onnx_graph import ensure_node_names, graph_inputs, load_onnx
    from .budget import default_budget

    work = out / "probes"
    setup = _setup(request, work, progress)
    session = tgt.session_options(setup) if tgt.capabilities.one_session else {}
    if not tgt.capabilities.one_session:
        tgt.options(request.options)
    budget = request.max_memory or default_budget()
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    if tgt.capabilities.one_session:
        from .bisect_stream import streams

        streamed = streams(model_path, budget) or streams(ref_path, budget)
    else:
        streamed = False
    if request.baseline is not None:
        base = load_baseline(request.baseline)
    elif streamed:
        from .stream_baseline import stream_baseline

        stream_baseline(ref_path, out / BASELINE_DIR, inputs=request.inputs, shapes=request.shapes or None,
                        seed=request.seed, budget=budget, progress=progress)
        base = load_baseline(out / BASELINE_DIR)
    else:
        run_baseline(ref_path, out / BASELINE_DIR, inputs=request.inputs, shapes=request.shapes or None,
                     seed=request.seed, progress=progress, mnn_gate=request.mnn_gate)
        base = load_baseline(out / BASELINE_DIR)
    timings["baseline_s"] = round(time.monotonic() - t0, 3)
    if streamed:
        from .external import open_lazy

        lazy = open_lazy(model_path)
        model = lazy.model
    else:
        model = ensure_node_names(load_onnx(model_path))
    prepared = prepare_inputs(graph_inputs(model), inputs=base.inputs_path, shapes=request.shapes or None)
    fixed = fix_input_shapes(model, prepared.shapes)
    points = cut_points(fixed, judged_names(base.reference))
    if not points:
        raise BadInputError("no tensor of the model can be compared with the reference",
                            hint="is the baseline a run of this model? Tensors are matched by name")
    work.mkdir(exist_ok=True)
    warnings: list[str] = []
    executor = _executor(request, budget, lazy.model, work) if streamed else None
    if executor is not None and executor.slots > 1:
        from .bisect_parallel import run_chained
        from .external import LazyModel

        first, probes, fanned, warnings = run_chained(
            executor, LazyModel(lazy.path, fixed, lazy.base), base.reference, base.floor, prepared.arrays, points,
            budget=budget, work=work, store=out / JOBS_DIR, session=session, th=th, progress=progress)
        timings.update(fanned)
        timings["htp_sim_s"] = round(timings["chain_s"] + timings["rounds_s"], 3)
    elif tgt.capabilities.one_session:
        import onnx

        from ..targets.sim_lowering import lower_for_simulator

        t0 = time.monotonic()
        if streamed:
            from .bisect_stream import chain_job
            from .external import LazyModel

            job, chain, warnings = chain_job(LazyModel(lazy.path, fixed, lazy.base), base.reference, prepared.arrays,
                                             budget, work)
            timings["pieces"] = float(len(chain.pieces))
        else:
            warnings = lower_for_simulator(fixed)  # the simulator refuses ReduceSumSquare; MNN lowers it likewise
            onnx.save(fixed, str(work / "model.onnx"))
            job = {"job": "bisect", "model": str(work / "model.onnx")}
        save_npz(work / "inputs.npz", prepared.arrays)
        timings["prepare_s"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        response = tgt.run_session({
            **job, "inputs_npz": str(work / "inputs.npz"),
            "reference": str(base.reference.dir), "floor": str(base.floor.dir) if base.floor is not None else None,
            "points": [_point_json(p) for p in points], **session, "thresholds": th.model_dump(mode="json"),
        }, log=work / "htp_probe_worker.log", timeout=request.timeout, progress=progress,
            what="HTP simulator bisection")
        timings["htp_sim_s"] = round(time.monotonic() - t0, 3)
        timings.update({f"htp_sim_{k}": v for k, v in response.items() if k.endswith("_s")})
        first, probes = response["first"], [Probe.model_validate({**p, "round": i}) for i, p in enumerate(response["probes"])]
        timings["rounds"] = float(len(probes))  # one probe after the other
    else:
        prober = tgt.prober(setup)
        floor_run = base.floor
        op_types = {o: n.op_type for n in fixed.graph.node for o in n.output}

        def probe(i: int) -> Probe:
            t0 = time.monotonic()
            point = points[i]
            names = list(point.frontier)
            values = prober.probe(truncate(fixed, names), names, prepared.arrays, work=work / f"cut{i:04d}")
            tensors = [judge(n, values.target[n], base.reference.array(n),
                             floor_run.array(n) if floor_run is not None and floor_run.has(n) else None,
                             op_types.get(n), th) for n in names]
            return summarise(i, point.position, point.op, point.op_type, tensors, time.monotonic() - t0)

        with progress.stage("bisect: probes", total=None, message=f"bisect: probing cuts on the {request.target}"):
            first, probes = first_bad(len(points), probe, th.excess_ok_db)
    floor = "fp16 floor (ORT CPU, every tensor rounded through fp16)" if base.floor is not None else "none"
    naming = {t.name: (t.op or "", t.op_type or "", t.position) for t in base.reference.tensors if t.op}
    result = _result(request, out, points, first, probes, floor, str(base.dir), naming)
    result.timings, result.warnings = timings, warnings
    result.fp16_range = fp16_range(base.reference)
    _explain(result, th)
    return result


def _executor(request: BisectRequest, budget: int, model: Any, work: Path) -> Any:
    """The parallel engine's executor for a chained bisection (serial for small models: no Ray imported)."""
    from ..parallel import ParallelOptions, choose_executor
    from .external import weight_bytes

    return choose_executor(ParallelOptions(workers=request.workers, cluster=request.cluster), budget=budget,
                           work_bytes=weight_bytes(model), timeout=request.timeout, log_dir=work)


def _point_json(p: CutPoint) -> dict[str, Any]:
    return {"index": p.index, "position": p.position, "op": p.op, "op_type": p.op_type, "outputs": list(p.outputs),
            "frontier": list(p.frontier)}


def _result(request: BisectRequest, out: Path, points: list[CutPoint], first: int | None, probes: list[Probe],
            floor: str, baseline: str | None, naming: dict[str, tuple[str, str, int]]) -> BisectResult:
    """``naming`` maps a tensor to the *reference* model's producer (op, type, position): an edited copy may
    compute a tensor with another node, but the op to report is the one the user's model has."""
    ff = None
    if first is not None:
        point = points[first]
        bad = next((p for p in probes if p.index == first), None)
        tensor = None
        if bad is not None:
            mine = [t for t in point.outputs if t in bad.bad_tensors]
            tensor = mine[0] if mine else (bad.bad_tensors[0] if bad.bad_tensors
                                           else bad.worst.name if bad.worst is not None else None)
        worst = bad.worst if bad is not None else None
        op, op_type, position = naming.get(tensor or "", (point.op, point.op_type, point.position))
        ff = FirstFailingOp(op=op, op_type=op_type, position=position, tensor=tensor,
                            target_sqnr_db=worst.target_sqnr_db if worst else None,
                            floor_sqnr_db=worst.floor_sqnr_db if worst else None,
                            excess_db=worst.excess_db if worst else None,
                            last_good_op=points[first - 1].op if first > 0 else None)
    return BisectResult(out=str(out), model=str(request.model), target=request.target, baseline=baseline, floor=floor,
                        cut_points=len(points), probes=probes, first_failing=ff,
                        verdict="real_bug" if ff is not None else "ok", summary="")


def _explain(result: BisectResult, th: Thresholds) -> None:
    """Verdict sentence and next steps; a healthy search with a range problem is a precision verdict."""
    n = len(result.probes)
    ff, rng = result.first_failing, result.fp16_range
    if ff is not None:
        result.summary = (f"{ff.op} ({ff.op_type}) is the first failing op: {n} probes over {result.cut_points} cuts; "
                          f"its output {ff.tensor!r} is {ff.excess_db} dB beyond the fp16 floor (target "
                          f"{ff.target_sqnr_db} dB vs floor {ff.floor_sqnr_db} dB) while every tensor the graph "
                          f"holds before it is within {th.jump_db:g} dB of the floor")
        result.next_steps = [step("lookup_op_constraints", ["op", ff.op_type],
                                  f"Check {ff.op_type}'s QNN/HTP constraints and known MNN traps: {ff.op} is the "
                                  f"first failing op, {ff.excess_db} dB beyond the fp16 floor.")]
    else:
        worst = result.probes[0].worst if result.probes else None
        tail = (f" (final outputs: target {worst.target_sqnr_db} dB, floor {worst.floor_sqnr_db} dB)"
                if worst is not None else "")
        result.summary = f"no op is beyond the fp16 floor by {th.jump_db:g} dB{tail}"
    if rng is not None:
        result.summary += f"; fp16 range: {rng.note}"
        if ff is None:
            result.verdict = "precision"
            if rng.op_type:
                result.next_steps = [step("lookup_op_constraints", ["op", rng.op_type],
                                          f"Check {rng.op_type}'s QNN/HTP constraints: {rng.op or rng.tensor!r} is "
                                          f"the first op leaving the fp16 range ({rng.note}).")]
    elif ff is None and worst_short(result, th):
        result.verdict = "precision"


def worst_short(result: BisectResult, th: Thresholds) -> bool:
    """The final outputs are short of the fp16 level but no worse than the floor: precision, not a bug."""
    worst = result.probes[0].worst if result.probes else None
    return worst is not None and (worst.target_sqnr_db or 0.0) < th.floor_cap_db - th.jump_db


def fp16_range(reference: Run) -> RangeFinding | None:
    """The first tensor (execution order) whose reference has fp16-overflowing values; see :func:`first_out_of_range`."""
    return first_out_of_range((rec.name, rec.op, rec.op_type, rec.position, reference.array(rec.name))
                              for rec in reference.iter_in_order() if rec.kind != "input")


def first_out_of_range(items: Iterable[tuple[str, str | None, str | None, int, np.ndarray]]) -> RangeFinding | None:
    """The first (name, op, op type, position, reference value) holding 65504 < |x| < 1e30.

    Larger magnitudes are "minus infinity" fill values (attention masks use -3.4e38): saturating them
    changes nothing downstream, so they are not a range problem.
    """
    for name, op, op_type, position, value in items:
        arr = np.abs(np.asarray(value, dtype=np.float64))
        if not arr.size:
            continue
        over = (arr > FP16_MAX) & (arr < SENTINEL)
        if over.any():
            peak = float(arr[over].max())
            return RangeFinding(tensor=name, op=op, op_type=op_type, position=position, max_abs_ref=peak,
                                note=f"{name!r} ({op_type} {op}) reaches |x| = {peak:.4g} > 65504 in fp32 "
                                     f"({int(over.sum())} values); HTP fp16 saturates there (at 131008, no inf), so "
                                     "what follows carries range error, not an op bug")
    return None


# --- targets with their own reference: reference, floor and target on the same machine --------------------

def _bisect_same_device(tgt: Target, request: BisectRequest, model: Any, reference_model: Any, out: Path,
                        th: Thresholds, progress: Progress) -> BisectResult:
    from ..inputs import prepare_inputs
    from ..onnx_graph import ensure_node_names, graph_inputs
    from ..targets.onnx_capture import capture_plan

    ensure_node_names(model)
    ensure_node_names(reference_model)
    work = out / "probes"
    prober = tgt.prober(_setup(request, work, progress))
    prepared = prepare_inputs(graph_inputs(reference_model), inputs=request.inputs, shapes=request.shapes or None,
                              seed=request.seed)
    ref_names = {p.name for p in capture_plan(reference_model) if p.kind != "input"}
    points = cut_points(model, ref_names)
    if not points:
        raise BadInputError("no float tensor of the model is also in the reference model",
                            hint="pass the original model as --reference-model; tensors are matched by name")
    work.mkdir(exist_ok=True)
    op_types = {o: n.op_type for n in model.graph.node for o in n.output}

    def probe(i: int) -> Probe:
        t0 = time.monotonic()
        point = points[i]
        names = list(point.frontier)
        values = prober.probe(truncate(model, names), names, prepared.arrays,
                              reference=truncate(reference_model, names), work=work / f"cut{i:04d}")
        assert values.reference is not None and values.floor is not None
        tensors = []
        for name in names:
            t = judge(name, values.target[name], values.reference[name], values.floor[name], op_types.get(name), th)
            for label, other_values in values.opinions.items():
                other = judge(name, other_values[name], values.reference[name], None, op_types.get(name), th)
                t.opinions[f"{label}_sqnr_db"] = other.target_sqnr_db
            tensors.append(t)
        return summarise(i, point.position, point.op, point.op_type, tensors, time.monotonic() - t0)

    with progress.stage("bisect: probes", total=None, message=f"bisect: probing cuts on the {request.target}"):
        first, probes = first_bad(len(points), probe, th.excess_ok_db)
    result = _result(request, out, points, first, probes,
                     f"MNN CPU precision 2 (fp16 where the CPU supports it) on the same {request.target}", None,
                     {o: (n.name, n.op_type, i) for i, n in enumerate(reference_model.graph.node) for o in n.output})
    _explain(result, th)
    return result
