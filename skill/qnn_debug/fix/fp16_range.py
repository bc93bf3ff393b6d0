"""Fix for ``precision`` from the fp16 range: an exact power-of-two rescale around the scale-invariant op.

Each place where the reference leaves 65504 (on the sample, or on the corner input of the declared input range:
every float input at the end of its range with the larger magnitude) gets its own rescale, sized from interval
arithmetic over the declared range with the overflow module's headroom, not from the one sample. The corner is
not the worst input in general (a tiled pattern can beat an all-255 image through a Conv with mixed-sign weights):
the interval bound is what no input in the range exceeds, and it is what is reported and what sizes the rescale.
Then the fixed model must prove itself: fp32 outputs within 1 ulp of the original on the sample and the corner
input, the baseline's range analysis clean on both, the HTP simulator's verdict ``ok``, and the ``.mnn`` written
beside the user's gated on MNN CPU.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .. import fs
from ..compare.overflow import HEADROOM
from ..compare.ranges import FP16_MAX, first_overflows
from ..compare.trust import verdict_alone
from ..errors import BadInputError, TargetError
from ..onnx_graph import ensure_node_names, graph_inputs, graph_outputs, load_onnx, mark_all
from ..progress import Progress
from ..runstore import INPUTS_FILE
from .intervals import Interval, largest, propagate
from .models import RANGE_PATTERNS, FixResult, Numbers, ProofCheck, RescaleSite
from .output import write_next_to
from .rescale import SQUARING, find_region, is_float, rewrite_reduce_sum_square
from .rescale import apply as apply_rescale
from .ship_mnn import ship_mnn
from .source import Source, numbers

MAX_SITES = 16
MAX_ULP = 1.0
REASSOCIATION = 1e-5  # float32 sums of thousands of terms in another order
# An interval bound beyond LOOSE**degree times the sample's value is taken as an artefact of the arithmetic (products
# of bounds through attention), not a value any input reaches; then the sample with SAMPLE_MARGIN**degree sizes it.
LOOSE = 2.0**6
SAMPLE_MARGIN = 2.0
FP16_LEVEL_DB = 60.0  # what fp16 alone allows at best (the compare's floor cap)
FLOOR_SLACK_DB = 3.0
SUFFIX = "fp16-rescaled"


def fix_fp16_range(source: Source, *, model: str | None, input_range: dict[str, list[float]] | None, out: Path,
                   soc_model: int, timeout: float, force: bool, progress: Progress) -> FixResult:
    """Rescale, write ``<model>.fp16-rescaled.onnx`` next to the model and prove it (see the module)."""
    from .. import npz_safe
    from ..inputs import save_npz

    res = source.result
    verdict = f"{res.verdict.kind} ({res.verdict.pattern})"
    if not (model or res.model):
        raise BadInputError("the comparison names no ONNX model", hint="pass --model with the .onnx that was compared")
    model_path = Path(model or res.model or "")
    if model_path.suffix.lower() != ".onnx":
        raise BadInputError(f"the fp16 rescale edits an ONNX model; {model_path} is not one",
                            hint="pass --model with the .onnx the .mnn was converted from")
    if source.baseline is None:
        raise BadInputError(f"{res.reference} is not a baseline's reference, so the sample inputs are unknown",
                            hint="pass the folder of `qnn-debug diagnose` or a comparison against a baseline")
    original = ensure_node_names(load_onnx(model_path))
    sample = npz_safe.load_npz(source.baseline / INPUTS_FILE)
    ranges, range_source = _input_ranges(original, sample, input_range)
    worst = _corner(original, sample, ranges)
    corner = _corner_words(ranges)
    outputs = [o.name for o in graph_outputs(original)]
    before = numbers(res, outputs, report=str(source.path))

    with progress.stage("fix: rescale", total=None, message="fix: sizing the rescale over the input range"):
        fixed, sites = _rescale(original, sample, worst, ranges, corner)
    if not sites:
        return FixResult(kind="none", verdict=verdict, before=before, input_range=ranges, input_range_source=range_source,
                         summary="Nothing in the ONNX reference leaves the fp16 range on the sample or on the "
                         f"corner input ({corner or 'no float input'}), so there is nothing to rescale; the failure "
                         "is elsewhere.")
    rescaled = onnx.ModelProto()
    rescaled.CopyFrom(fixed)
    rewritten = rewrite_reduce_sum_square(fixed)
    onnx.checker.check_model(fixed)
    artefact = write_next_to(model_path, SUFFIX, fixed.SerializeToString())

    fs.make_dirs(out, what="fix output directory")
    worst_path = save_npz(out / "corner_inputs.npz", worst) if ranges else None
    feeds = {"sample": sample, **({f"corner ({corner})": worst} if ranges else {})}
    proof = [fp32_check(original, rescaled, feeds)]
    if rewritten:  # a different summation order, not an exact rewrite: held to float32 re-association
        proof.append(_rewrite_check(rescaled, fixed, feeds))
    with progress.stage("fix: prove", total=None, message="fix: re-running the fixed model on the simulator"):
        after, checks = _simulate(artefact, source.baseline / INPUTS_FILE, worst_path, out, outputs, before.tensor,
                                  soc_model, timeout, force, progress, corner)
    proof += checks
    shipped, ship_check = ship_mnn(artefact, source=source, onnx_model=model_path, suffix=SUFFIX,
                                   inputs=source.baseline / INPUTS_FILE, out=out, timeout=timeout, force=force,
                                   progress=progress)
    proof.append(ship_check)
    proven = all(c.passed for c in proof)
    failed = [c.name for c in proof if not c.passed]
    note = f" (ReduceSumSquare rewritten as ReduceSum(Mul(x, x)): {', '.join(rewritten)})" if rewritten else ""
    where = "; ".join(f"{s.source} x 2^-{s.exponent} ({s.place}) for {s.overflow_tensor}" for s in sites)
    summary = (f"{'Proven' if proven else 'NOT proven (failed: ' + '; '.join(failed) + ')'}: {len(sites)} exact power-of-two rescale(s): {where}{note}. "
               f"Before: {_numbers(before)}; after: {_numbers(after)}.")
    steps = _next_steps(artefact, source.baseline / INPUTS_FILE)
    return FixResult(kind="fp16_rescale", verdict=verdict, summary=summary, artefact=str(artefact), proven=proven,
                     proof=proof, before=before, after=after, sites=sites, input_range=ranges,
                     input_range_source=range_source, out=str(out), next_steps=steps, mnn=shipped,
                     not_proven=[] if proven else [c.detail for c in proof if not c.passed])


def _numbers(n: Numbers | None) -> str:
    if n is None:
        return "no simulator result"
    outs = ", ".join(f"{o} {_db(v)}" for o, v in n.outputs_sqnr_db.items())
    return f"{n.verdict} ({n.pattern}), {_db(n.tensor_sqnr_db)} at {n.tensor}, outputs {outs}"


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def _input_ranges(model: onnx.ModelProto, sample: dict[str, np.ndarray],
                  declared: dict[str, list[float]] | None) -> tuple[dict[str, list[float]], str]:
    floats = [s.name for s in graph_inputs(model) if is_float(model, s.name)]
    unknown = set(declared or {}) - set(floats)
    if unknown:
        raise BadInputError(f"--input-range names {', '.join(sorted(unknown))}, not a float input of the model",
                            hint=f"float inputs: {', '.join(floats) or 'none'}")
    out: dict[str, list[float]] = {}
    for name in floats:
        if declared and name in declared:
            lo, hi = declared[name]
            if not lo <= hi:
                raise BadInputError(f"--input-range {name}={lo}:{hi} is empty", hint="give MIN:MAX with MIN <= MAX")
            out[name] = [float(lo), float(hi)]
        elif name in sample:
            out[name] = [float(np.min(sample[name])), float(np.max(sample[name]))]
    return out, "declared" if declared else "sample"


def _corner_words(ranges: dict[str, list[float]]) -> str:
    return ", ".join(f"{n} = {hi if abs(hi) >= abs(lo) else lo:g} everywhere" for n, (lo, hi) in ranges.items())


def _corner(model: onnx.ModelProto, sample: dict[str, np.ndarray],
            ranges: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """Each float input at the end of its range with the larger magnitude (every pixel at 255); others as sampled.
    A corner of the range, not its worst input: the interval bound covers every input."""
    out = dict(sample)
    for name, (lo, hi) in ranges.items():
        if name in sample:
            out[name] = np.full_like(sample[name], hi if abs(hi) >= abs(lo) else lo)
    return out


def run_all(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, every: bool = True) -> dict[str, np.ndarray]:
    """Every tensor (or the outputs) of ``model`` on ONNX Runtime CPU fp32, optimisations off (op by op)."""
    import onnxruntime as ort

    m = mark_all(model) if every else model
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(m.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        values = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as e:
        raise TargetError(" ".join(f"ONNX Runtime could not run the model: {e}".split())[:400],
                          hint="check the model runs with `qnn-debug baseline`") from None
    got = {k: np.asarray(v) for k, v in feeds.items()}
    got.update({n: np.asarray(v) for n, v in zip(names, values, strict=True)})
    return got


def _maxima(values: dict[str, np.ndarray]) -> dict[str, float]:
    out = {}
    for name, v in values.items():
        if v.dtype.kind == "f" and v.size:
            finite = np.abs(v[np.isfinite(v)])
            out[name] = float(finite.max()) if finite.size else math.inf
    return out


def _source(model: onnx.ModelProto, op_name: str) -> str:
    """What a rescale multiplies for an op leaving the range: what is squared when the op squares (or sums squares)."""
    by_name = {n.name: n for n in model.graph.node}
    producer = {o: n for n in model.graph.node for o in n.output}
    node = by_name[op_name]

    def squaring(n: onnx.NodeProto) -> bool:
        return n.op_type in SQUARING or (n.op_type == "Mul" and len(n.input) == 2 and n.input[0] == n.input[1])

    if squaring(node):
        return node.input[0]
    before = producer.get(node.input[0])
    if before is not None and squaring(before):
        return before.input[0]
    return node.input[0]


def _rescale(model: onnx.ModelProto, sample: dict[str, np.ndarray], worst: dict[str, np.ndarray],
             ranges: dict[str, list[float]], corner: str) -> tuple[onnx.ModelProto, list[RescaleSite]]:
    current = model
    sites: list[RescaleSite] = []
    intervals: dict[str, Interval] = {k: (v[0], v[1]) for k, v in ranges.items()}
    for _ in range(MAX_SITES):
        on_sample = run_all(current, sample)
        sample_max = _maxima(on_sample)
        worst_max = _maxima(run_all(current, worst))
        maxima = {k: max(v, worst_max.get(k, 0.0)) for k, v in sample_max.items()}
        ops = [(n.name, tuple(n.input), tuple(o for o in n.output if o)) for n in current.graph.node if n.op_type != "Constant"]
        origins = first_overflows(ops, maxima, FP16_MAX)
        if not origins:
            return current, sites
        op_name, tensor = origins[0]
        src = _source(current, op_name)
        region = find_region(current, src, tensor)
        if region is None:
            raise BadInputError(f"no exact place to rescale for {tensor} (from {op_name}): what follows {src} is not "
                                "scale-invariant (no normalisation closes it before a Softmax, a residual or an output)",
                                hint="keep that region off the NPU (fp32 on CPU) instead")
        shapes = {k: tuple(int(d) for d in v.shape) for k, v in on_sample.items()}
        bounds = propagate(current, intervals, shapes)
        k, used, by = _exponent(region.degrees, bounds, sample_max, region.denominator())
        by = by or tensor
        bound = largest(bounds.get(by))
        d = float(region.degrees[by])
        current, place, changed = apply_rescale(current, region, k)
        sites.append(RescaleSite(
            overflow_op=op_name, overflow_tensor=tensor, source=src, exponent=k, place=place, region=region.nodes,
            constants=changed, bound_source=used, sized_by=by, worst_case_max=_g(bound), interval_bound=_g(bound),
            corner_max=_g(worst_max.get(by)) if ranges else None, corner=corner or None,
            sample_max=_g(sample_max.get(by)),
            after_max=_g((bound if bound is not None else maxima.get(by, math.nan)) * 2.0 ** (-k * d))))
    raise BadInputError(f"more than {MAX_SITES} places leave the fp16 range", hint="keep the model's float parts on CPU")


def _exponent(degrees: dict[str, Any], bounds: dict[str, Interval | None], sample_max: dict[str, float],
              denominator: int) -> tuple[int, str, str | None]:
    """Smallest k (a multiple of ``denominator``) bringing every scaled-down tensor's bound HEADROOM below 65504,
    what bounded it (interval arithmetic, or the sample where the interval is unbounded) and the tensor that set k."""
    need, used, by = 1.0, "interval", None
    for name, d in degrees.items():
        if d <= 0:
            continue
        b, seen = largest(bounds.get(name)), sample_max.get(name)
        if b is None or (seen is not None and b > seen * LOOSE ** float(d)):  # no bound, or one no input reaches
            b, used = (seen * SAMPLE_MARGIN ** float(d) if seen is not None else None), "sample"
        if b is not None and b * HEADROOM > FP16_MAX and math.log2(b * HEADROOM / FP16_MAX) / float(d) > need:
            need, by = math.log2(b * HEADROOM / FP16_MAX) / float(d), name
    k = max(1, math.ceil(need - 1e-9))
    return math.ceil(k / denominator) * denominator, used, by


def _g(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")


def fp32_check(original: onnx.ModelProto, fixed: onnx.ModelProto, feeds: dict[str, dict[str, np.ndarray]]) -> ProofCheck:
    worst, where = 0.0, []
    outputs = [o.name for o in original.graph.output]
    for label, inputs in feeds.items():
        a, b = run_all(original, inputs, every=False), run_all(fixed, inputs, every=False)
        ulp = max((_ulps(a[o], b[o]) for o in outputs), default=0.0)
        worst = max(worst, ulp)
        where.append(f"{label} {ulp:g} ulp")
    return ProofCheck(name="fp32 outputs equal the original's", passed=worst <= MAX_ULP,
                      detail=f"largest difference of the outputs on ONNX Runtime CPU fp32: {', '.join(where)} "
                      f"(limit {MAX_ULP:g} ulp)")


def _rewrite_check(before: onnx.ModelProto, after: onnx.ModelProto,
                   feeds: dict[str, dict[str, np.ndarray]]) -> ProofCheck:
    worst, where = 0.0, []
    outputs = [o.name for o in before.graph.output]
    for label, inputs in feeds.items():
        a, b = run_all(before, inputs, every=False), run_all(after, inputs, every=False)
        rel = max((float(np.max(np.abs(a[o].astype(np.float64) - b[o]) / np.maximum(np.abs(a[o]), 1e-30)))
                   if a[o].size else 0.0 for o in outputs), default=0.0)
        worst = max(worst, rel)
        where.append(f"{label} {rel:.2g}")
    return ProofCheck(name="ReduceSumSquare -> ReduceSum(Mul(x, x)) keeps the outputs", passed=worst <= REASSOCIATION,
                      detail=f"largest relative difference of the outputs on ONNX Runtime CPU fp32: {', '.join(where)} "
                      f"(limit {REASSOCIATION:g}: the sum is taken in another order)")


def _ulps(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if a64.shape != b64.shape:
        return math.inf
    if not np.array_equal(np.isfinite(a64), np.isfinite(b64)):
        return math.inf
    ok = np.isfinite(a64)
    if not ok.any():
        return 0.0
    diff = np.abs(a64[ok].astype(np.float64) - b64[ok].astype(np.float64))
    spacing = np.spacing(np.maximum(np.abs(a64[ok]), np.abs(b64[ok]))).astype(np.float64)
    return float((diff / spacing).max())


def _simulate(artefact: Path, sample: Path, worst: Path | None, out: Path, outputs: list[str], tensor: str | None,
              soc_model: int, timeout: float, force: bool, progress: Progress,
              corner: str = "") -> tuple[Any, list[ProofCheck]]:
    from ..baseline import load_baseline, run_baseline
    from ..diagnose import diagnose
    from .source import numbers as nums

    diag = diagnose(artefact, out / "sample", inputs=sample, target="htp-sim", soc_model=soc_model, force=force,
                    mnn_gate=False, timeout=timeout, progress=progress)
    checks: list[ProofCheck] = []
    ranges = load_baseline(diag.baseline).report.ranges
    checks.append(_range_check("sample", ranges))
    if worst is None:
        checks.append(ProofCheck(name="fp16 range clean (corner input)", passed=True,
                                 detail="the model has no float input to bound: its inputs are the sample's, so the "
                                 "corner is the sample above"))
    else:
        worst_base = run_baseline(artefact, out / "corner", inputs=worst, force=force, mnn_gate=False,
                                  progress=progress)
        checks.append(_range_check(f"corner input: {corner}" if corner else "corner input", worst_base.report.ranges))
    after = None
    if diag.compare is None:
        checks.append(ProofCheck(name="HTP simulator: the fp16-range finding is gone", passed=False,
                                 detail="the simulator gave no comparison"))
        return after, checks
    c = diag.compare
    rows = {r.stands_for or r.name: r for r in c.tensors}
    after = nums(c, outputs, tensor=tensor if tensor in rows else None, report=diag.report_dir)
    v = c.verdict
    ranged = v.pattern in RANGE_PATTERNS or "fp16_range" in v.evidence
    checks.append(ProofCheck(name="HTP simulator: the fp16-range finding is gone",
                             passed=v.kind == "ok" or (v.kind == "precision" and not ranged),
                             detail=f"verdict {v.kind} ({v.pattern}) on the sample: {verdict_alone(c)}"))
    short = []
    for o in outputs:
        row = rows.get(o)
        got = row.metrics.get("sqnr_db") if row else None
        floor = (row.floor_metrics or {}).get("sqnr_db") if row else None
        want = min(floor if floor is not None else FP16_LEVEL_DB, FP16_LEVEL_DB) - FLOOR_SLACK_DB
        short.append((o, got, floor, got is not None and got >= want))
    checks.append(ProofCheck(name="HTP simulator outputs at the fp16 floor", passed=all(ok for *_, ok in short),
                             detail="; ".join(f"{o}: {_db(g)} (fp16 floor {_db(f)})" for o, g, f, _ in short)
                             + f" (required: within {FLOOR_SLACK_DB:g} dB of the floor, or of {FP16_LEVEL_DB:g} dB when the floor is higher)"))
    return after, checks


def _range_check(label: str, ranges: Any) -> ProofCheck:
    if ranges is None:
        return ProofCheck(name=f"fp16 range clean ({label})", passed=False, detail="the baseline has no range report")
    largest_entry = ranges.largest
    top = f"; largest |value| {largest_entry.max_abs:.4g} at {largest_entry.tensor}" if largest_entry else ""
    return ProofCheck(name=f"fp16 range clean ({label})", passed=ranges.unsafe_count == 0,
                      detail=f"{ranges.unsafe_count} of {ranges.checked} float tensors beyond 65504 on the {label} "
                      f"input{top}")


def _next_steps(artefact: Path, inputs: Path) -> list[Any]:
    from ..next_step import NextStep

    return [NextStep(tool="diagnose", cli=f"qnn-debug diagnose {shlex.quote(str(artefact))} --inputs "
                     f"{shlex.quote(str(inputs))}",
                     why="the fixed model on the simulator with the same inputs (the proof above did this); convert "
                     "it to .mnn as before for the phone")]
