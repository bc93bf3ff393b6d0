"""``qnn-debug bisect``: find the first failing op by truncating the model, when no dump is possible.

Each probe cuts the model after one op (the cut's *frontier* becomes the graph outputs, see
:mod:`.cut`), runs that truncated model unmarked on the target, and judges the frontier against the
reference exactly as ``compare`` judges a tensor (beyond the fp16 floor by the jump gate = bad). A binary
search over the cut points needs about log2(N) + 1 probes.

- ``htp-sim``: the reference and the floor come from a baseline (ORT CPU fp32 and the fp16 floor); all
  probes run in one simulator worker process.
- ``device`` / ``host``: each truncated model is converted to ``.mnn`` and run with ModuleBasic on the same
  device three times: QNN (forward type 5, precision low = fp16), MNN CPU fp32 (forward 0, precision 1) as
  the reference and MNN CPU at precision 2 (fp16 where the CPU has it) as the floor; with ``opencl`` also
  OpenCL fp16 (forward 3) as a third opinion.

The fp16-range check needs no probe: the first tensor whose reference leaves the fp16 range (|x| > 65504)
is named from the baseline; HTP saturates there (at 131008, never inf), so it is a range problem, not a bug.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ..compare.thresholds import Thresholds
from ..errors import BadInputError
from ..next_step import step
from ..progress import NULL_PROGRESS, Progress
from ..runstore import Run, atomic_write_text, check_output_dir
from .cut import CutPoint, cut_points, truncate
from .models import BisectResult, FirstFailingOp, RangeFinding
from .probe import Probe, first_bad, judge, summarise

FP16_MAX = 65504.0
SENTINEL = 1e30  # |x| at or above this is a -inf/+inf stand-in (masks), not a value
RESULT_FILE = "bisect.json"
BASELINE_DIR = "baseline"
WORKER = "qnn_debug.workers.sim_probe_worker"
DEVICE_OPTIONS = {"serial", "adb", "mnn_dir"}
HOST_OPTIONS = {"mnn_build_dir", "qnn_lib_dir"}
SIM_OPTIONS = {"disabled_optimizers"}


class BisectRequest(BaseModel):
    """What to bisect and where. ``reference_model`` (default ``model``) is what the reference runs:
    pass the original there and an edited copy as ``model`` to localise an injected bug."""

    model: Path
    out: Path
    target: Literal["htp-sim", "device", "host"] = "htp-sim"
    reference_model: Path | None = None
    baseline: Path | None = None  # reuse this baseline (htp-sim) instead of building one under out/
    inputs: Path | None = None
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    seed: int = 0
    soc_model: int = 69
    htp_arch: int | None = None
    options: dict[str, str] = Field(default_factory=dict)
    opencl: bool = False  # device/host: also run OpenCL fp16 (forward type 3) as a third opinion
    mnn_gate: bool = True
    force: bool = False
    timeout: float = 1800.0


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
    out = _prepare_out(Path(request.out), request.force)
    model = load_onnx(model_path)
    if request.target == "htp-sim":
        result = _bisect_sim(request, model, ref_path, out, th, progress)
    else:
        result = _bisect_mnn(request, model, load_onnx(ref_path), out, th, progress)
    result.elapsed_s = round(time.monotonic() - started, 3)
    atomic_write_text(out / RESULT_FILE, result.model_dump_json(indent=1))
    return result


def _prepare_out(out: Path, force: bool) -> Path:
    def ours(p: Path) -> bool:
        return (p / RESULT_FILE).exists() or (p / BASELINE_DIR).is_dir()

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


def _bisect_sim(request: BisectRequest, model: Any, ref_path: Path, out: Path, th: Thresholds,
                progress: Progress) -> BisectResult:
    from ..baseline import load_baseline, run_baseline
    from ..inputs import fix_input_shapes, prepare_inputs, save_npz
    from ..onnx_graph import ensure_node_names, graph_inputs
    from ..targets import qnn_ep
    from ..targets.htp_sim import split_options
    from ..workers import run_worker

    extra, disabled, _ = split_options(request.options)
    options = qnn_ep.provider_options(request.soc_model, request.htp_arch, extra)
    if request.baseline is not None:
        base = load_baseline(request.baseline)
    else:
        run_baseline(ref_path, out / BASELINE_DIR, inputs=request.inputs, shapes=request.shapes or None,
                     seed=request.seed, progress=progress, mnn_gate=request.mnn_gate)
        base = load_baseline(out / BASELINE_DIR)
    ensure_node_names(model)
    prepared = prepare_inputs(graph_inputs(model), inputs=base.inputs_path, shapes=request.shapes or None)
    fixed = fix_input_shapes(model, prepared.shapes)
    points = cut_points(fixed, judged_names(base.reference))
    if not points:
        raise BadInputError("no tensor of the model can be compared with the reference",
                            hint="is the baseline a run of this model? Tensors are matched by name")
    work = out / "probes"
    work.mkdir(exist_ok=True)
    import onnx

    onnx.save(fixed, str(work / "model.onnx"))
    save_npz(work / "inputs.npz", prepared.arrays)
    response = run_worker(WORKER, {
        "job": "bisect", "model": str(work / "model.onnx"), "inputs_npz": str(work / "inputs.npz"),
        "reference": str(base.reference.dir), "floor": str(base.floor.dir) if base.floor is not None else None,
        "points": [_point_json(p) for p in points], "options": options, "disabled_optimizers": disabled,
        "thresholds": th.model_dump(mode="json"),
    }, log_path=work / "htp_probe_worker.log", timeout=request.timeout, progress=progress,
        what="HTP simulator bisection")
    probes = [Probe.model_validate(p) for p in response["probes"]]
    floor = "fp16 floor (ORT CPU, every tensor rounded through fp16)" if base.floor is not None else "none"
    naming = {t.name: (t.op or "", t.op_type or "", t.position) for t in base.reference.tensors if t.op}
    result = _result(request, out, points, response["first"], probes, floor, str(base.dir), naming)
    result.fp16_range = fp16_range(base.reference)
    _explain(result, th)
    return result


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
            tensor = mine[0] if mine else (bad.bad_tensors[0] if bad.bad_tensors else None)
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


# --- device / host: ModuleBasic on the same device as reference, floor and target ------------------------

def _bisect_mnn(request: BisectRequest, model: Any, reference_model: Any, out: Path, th: Thresholds,
                progress: Progress) -> BisectResult:
    from ..inputs import prepare_inputs
    from ..onnx_graph import ensure_node_names, graph_inputs
    from ..targets.onnx_capture import capture_plan

    ensure_node_names(model)
    ensure_node_names(reference_model)
    executor = _executor(request)
    prepared = prepare_inputs(graph_inputs(reference_model), inputs=request.inputs, shapes=request.shapes or None,
                              seed=request.seed)
    ref_names = {p.name for p in capture_plan(reference_model) if p.kind != "input"}
    points = cut_points(model, ref_names)
    if not points:
        raise BadInputError("no float tensor of the model is also in the reference model",
                            hint="pass the original model as --reference-model; tensors are matched by name")
    work = out / "probes"
    work.mkdir(exist_ok=True)
    op_types = {o: n.op_type for n in model.graph.node for o in n.output}

    def probe(i: int) -> Probe:
        t0 = time.monotonic()
        point = points[i]
        names = list(point.frontier)
        values = _mnn_probe(executor, model, reference_model, names, prepared.arrays, work / f"cut{i:04d}", request,
                            progress)
        tensors = []
        for name in names:
            t = judge(name, values["qnn"][name], values["cpu_fp32"][name], values["cpu_fp16"][name], op_types.get(name), th)
            if "opencl_fp16" in values:
                other = judge(name, values["opencl_fp16"][name], values["cpu_fp32"][name], None, op_types.get(name), th)
                t.opinions["opencl_fp16_sqnr_db"] = other.target_sqnr_db
            tensors.append(t)
        return summarise(i, point.position, point.op, point.op_type, tensors, time.monotonic() - t0)

    with progress.stage("bisect: probes", total=None, message=f"bisect: probing cuts on the {request.target}"):
        first, probes = first_bad(len(points), probe)
    result = _result(request, out, points, first, probes,
                     f"MNN CPU precision 2 (fp16 where the CPU supports it) on the same {request.target}", None,
                     {o: (n.name, n.op_type, i) for i, n in enumerate(reference_model.graph.node) for o in n.output})
    _explain(result, th)
    return result


def _executor(request: BisectRequest) -> Any:
    own = DEVICE_OPTIONS if request.target == "device" else HOST_OPTIONS
    unknown = sorted(set(request.options) - own)
    if unknown:
        raise BadInputError(f"bisect on {request.target} does not take the option(s) {', '.join(unknown)}",
                            hint="allowed: " + ", ".join(sorted(own)))
    if request.target == "host":
        from ..targets.host import make_executor

        return make_executor(request.options)
    from ..device.probe import probe_device
    from ..targets.device import DEFAULT_MNN_DIR, AdbExecutor, make_adb

    adb = make_adb(request.options)
    mnn_dir = request.options.get("mnn_dir") or DEFAULT_MNN_DIR
    found = probe_device(adb, mnn_dir=mnn_dir, mode="online")
    missing = [f for f in found.missing if f.needed_for in ("all", "online")]
    if missing:
        from ..errors import DeviceError

        raise DeviceError(f"{found.serial} lacks {', '.join(f.name for f in missing)} in {mnn_dir}",
                          hint="push them: " + " ; ".join(f.push or "" for f in missing))
    return AdbExecutor(adb, mnn_dir, timeout=max(request.timeout, 60.0))


def _mnn_probe(executor: Any, model: Any, reference_model: Any, names: list[str], arrays: dict[str, np.ndarray],
               work: Path, request: BisectRequest, progress: Progress) -> dict[str, dict[str, np.ndarray]]:
    """Convert both cuts to .mnn and run them with ModuleBasic: QNN fp16, CPU fp32, CPU fp16 (+ OpenCL fp16)."""
    import onnx

    from ..mnn.runner import require_success, run_module_basic
    from ..mnn.testdir_builder import write_testdir
    from ..workers import run_worker

    work.mkdir(parents=True, exist_ok=True)
    models = {}
    for role, source in (("target", model), ("reference", reference_model)):
        cut = truncate(source, names)
        onnx.save(cut, str(work / f"{role}.onnx"))
        run_worker("qnn_debug.workers.mnn_convert_worker", {"src": str(work / f"{role}.onnx"),
                                                            "dst": str(work / f"{role}.mnn")},
                   log_path=work / f"convert_{role}.log", timeout=request.timeout, what="MNN converter")
        models[role] = (work / f"{role}.mnn", {v.name for v in cut.graph.input})
    feeds = {k: v for k, v in arrays.items() if k in models["reference"][1]}
    testdir = work / "testdir"
    write_testdir(testdir, feeds, names, shape_mutable=False)
    runs = [("qnn", "target", 5, 2), ("cpu_fp32", "reference", 0, 1), ("cpu_fp16", "reference", 0, 2)]
    if request.opencl:
        runs.append(("opencl_fp16", "reference", 3, 2))
    values: dict[str, dict[str, np.ndarray]] = {}
    for label, role, forward, precision in runs:
        mb = run_module_basic(executor, model=models[role][0], companions=[], testdir=testdir,
                              local_dir=work / label, forward=forward, precision=precision, timeout=request.timeout,
                              progress=progress)
        require_success(mb)
        missing = [n for n in names if n not in mb.outputs]
        if missing:
            from ..errors import TargetError

            raise TargetError(f"ModuleBasic ({label}) wrote no value for {missing[0]!r}",
                              hint=f"see {work / label / 'modulebasic.log'}")
        values[label] = dict(mb.outputs)
    return values

