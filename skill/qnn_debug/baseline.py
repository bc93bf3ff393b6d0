"""The trusted baseline: fp32 reference, fp16 floor and the MNN-CPU gate, for one model and one input.

A baseline directory::

    inputs.npz       the exact inputs used (feed them to every later dump: --inputs <dir>/inputs.npz)
    reference/       ORT CPU fp32, every float tensor (MNN CPU fp32 for an .mnn model)
    fp16_floor/      the same graph with every float tensor rounded through fp16 (ONNX models)
    mnn_cpu/         MNN CPU fp32 of the converted model (the gate; ONNX models)
    baseline.json    BaselineReport: the gate numbers and whether the reference can be trusted

The gate: two independent fp32 implementations (ONNX Runtime and MNN) must agree on the model's final
outputs far more closely than fp16 storage alone perturbs them, otherwise a later "HTP is off by X"
cannot be told apart from "the reference is off by X". Per output the limit is a tenth of the floor's
relative error, kept within [1e-4, 1e-2] (fp32 implementations differ by ~1e-6..1e-4 through
summation order and Winograd convolutions). A graph that computes in fp16 (float16 weights, constants,
inputs or casts) is computed in fp16 by ORT and in fp32 by MNN: where its fp16 arithmetic reaches, the limit
is twice that arithmetic's own error, measured on the graph lifted to fp32 (:mod:`qnn_debug.baseline_fp16`). Tensors are paired as ``compare`` pairs them (a fused MNN op with
the last model node it covers); the first tensor in graph order beyond its own limit is named as the cause,
the worst as where the error grew. MNN gets every input in the dtype its ``.mnn`` declares, converted by value
(:mod:`qnn_debug.mnn.feeds`: int64 token ids become int32, an id beyond int32 is refused).

QDQ models: the reference is ORT's fake-quant run (graph optimisation off, so every DQ → op → Q runs
in float), and quantized tensors are stored dequantized with their integers, like the simulator's.
ORT's integer QDQ kernels saturate on AVX2 hosts without VNNI, and MNN 3.6.1's converter drops QDQ
graphs (measured: a 47-node A8W8 model became a 1-op .mnn, "Converted Success!"), so neither can
cross-check it; the gate is recorded as not applicable.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from . import fs
from .baseline_fp16 import (  # noqa: F401  (GATE_*: re-exported, the gate's constants)
    GATE_FLOOR_FRACTION,
    GATE_MAX_LIMIT,
    GATE_MIN_LIMIT,
    Fp16Arithmetic,
    gate_limit,
    limit_words,
    measure_fp16,
)
from .baseline_models import (  # noqa: F401  (re-exported: the result models live in the light module)
    BASELINE_SCHEMA,
    BaselineReport,
    BaselineResult,
    GateOutput,
    GateReport,
    GateStatus,
    MnnModelCheck,
)
from .compare.metrics import error_stats, max_rel_error
from .compare.rail import baseline_judge
from .compare.ranges import range_report
from .errors import BadInputError
from .progress import NULL_PROGRESS, Progress
from .runstore import (
    BASELINE_FILE,
    FLOOR_DIR,
    INPUTS_FILE,
    MNN_DIR,
    REFERENCE_DIR,
    RUN_FILE,
    TENSOR_DIR,
    Run,
    atomic_write_text,
    check_output_dir,
    load_run,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np

    from .onnx_graph import NodeInfo
    from .runstore import TensorRecord

NEAR_ZERO = 1e-4  # an output whose largest magnitude is below this carries no signal to compare
# Tried with MNN 3.6.1's expression API (load_as_dict, evaluate op by op, Var.replace each output with its
# fp16-rounded value): most ops work, but on PP-OCR cls every op behind a Shape → Slice → Reshape chain
# fails to read once the input is replaced ("call to readMap meet a error"), the final output included.
# A partial floor would silently be fp32 past those ops, so none is built.
MNN_FLOOR_UNAVAILABLE = (
    "not built: MNN's expression API cannot re-evaluate a loaded .mnn graph op by op with rounded tensors "
    "(shape-dependent ops such as Reshape after Shape/Slice fail to read); build the baseline from the ONNX "
    "model to get a floor"
)


@dataclass
class Baseline:
    """A loaded baseline directory: runs are memory-mapped on access, nothing is re-run."""

    dir: Path
    report: BaselineReport
    reference: Run
    floor: Run | None
    mnn_cpu: Run | None

    @property
    def inputs_path(self) -> Path:
        return self.dir / INPUTS_FILE


def run_baseline(model: str | os.PathLike[str], out: str | os.PathLike[str], *, inputs: str | os.PathLike[str] | None = None,
                 shapes: dict[str, list[int]] | None = None, seed: int = 0, force: bool = False,
                 progress: Progress = NULL_PROGRESS, mnn_gate: bool = True,
                 mnn_model: str | os.PathLike[str] | None = None) -> BaselineResult:
    """Build the baseline of ``model`` (``.onnx`` or ``.mnn``) in ``out`` and return its report.

    ``mnn_model``: the user's own ``.mnn`` of this ONNX model; it is gated against the reference too, and the
    report says whether it differs from the ``.mnn`` converted here (the one the usual gate checks).
    """
    path = Path(model)
    fmt = _model_format(path)
    user_mnn = _check_user_mnn(mnn_model, fmt)
    out_dir = _prepare_dir(Path(out), force)
    if fmt == "onnx":
        report, fp16 = _onnx_baseline(path, out_dir, inputs, shapes, seed, progress, mnn_gate)
        if user_mnn is not None:
            _gate_user_mnn(report, user_mnn, out_dir, progress, fp16)
    else:
        report = _mnn_baseline(path, out_dir, inputs, shapes, seed, progress)
    return finish_baseline(out_dir, report, progress)


def prepare_baseline_dir(out: Path, force: bool) -> Path:
    """``out`` claimed for a baseline: empty, or (with ``force``) a previous baseline's, cleared."""
    return _prepare_dir(out, force)


def finish_baseline(out_dir: Path, report: BaselineReport, progress: Progress = NULL_PROGRESS) -> BaselineResult:
    """The fp16-range report, ``baseline.json`` written last, the folder released: a baseline's last step, also
    for one whose runs were written piece by piece (``qnn_debug.localise.stream_baseline``)."""
    with progress.stage("baseline: fp16 range", total=None, message="baseline: checking the fp16 range of every tensor"):
        reference = load_run(out_dir / REFERENCE_DIR)
        report.ranges = range_report(reference, judge=baseline_judge(reference))
        user = report.mnn_model
        if user is not None and (out_dir / user.run).is_dir():  # the file given is what the gate is about
            user_run = load_run(out_dir / user.run)
            user.ranges = range_report(user_run, judge=baseline_judge(user_run))
    if report.mnn_model is not None and report.mnn_model.ranges is not None:
        report.sentence = f"{report.sentence} {_user_range_sentence(report)}"
    elif not report.ranges.fp16_safe:
        report.sentence = f"{report.sentence} {report.ranges.sentence()}"
    atomic_write_text(out_dir / BASELINE_FILE, report.model_dump_json(indent=1))
    fs.release_dir(out_dir)
    counts = {}
    for sub in report.runs.values():
        counts[sub] = len(load_run(out_dir / sub).tensors)
    return BaselineResult(out=str(out_dir), inputs_path=str(out_dir / INPUTS_FILE), report=report, tensors=counts)


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Load a baseline directory written by :func:`run_baseline`, with clear errors when it is not one."""
    p = Path(path)
    if p.is_file() and p.name == BASELINE_FILE:
        p = p.parent
    if not p.is_dir():
        raise BadInputError(f"baseline directory {p} does not exist", hint="run `qnn-debug baseline MODEL --out DIR` first")
    file = p / BASELINE_FILE
    if not file.exists():
        raise BadInputError(f"{p} is not a baseline directory (no {BASELINE_FILE})",
                            hint="pass the --out directory of `qnn-debug baseline`; it may not have finished")
    try:
        report = BaselineReport.model_validate(fs.read_json(file, what="baseline report"))
    except ValidationError as e:
        raise BadInputError(f"{file} is unreadable: {e.errors()[0]['msg']}", hint="re-run `qnn-debug baseline`") from None
    if "reference" not in report.runs:
        raise BadInputError(f"{file} names no reference run (its runs: {', '.join(sorted(report.runs)) or 'none'})",
                            hint="the baseline was edited or did not finish: re-run `qnn-debug baseline MODEL --out DIR` "
                                 "into a new DIR")
    runs = {role: load_run(_run_subdir(p, role, sub)) for role, sub in report.runs.items()}
    return Baseline(dir=p, report=report, reference=runs["reference"], floor=runs.get("fp16_floor"),
                    mnn_cpu=runs.get("mnn_cpu"))


def _run_subdir(base: Path, role: str, sub: str) -> Path:
    """A run named in baseline.json: always a folder *inside* the baseline, whatever the file says."""
    if role not in ("reference", "fp16_floor", "mnn_cpu") or not sub or "/" in sub or "\\" in sub or sub in (".", ".."):
        raise BadInputError(f"{base / BASELINE_FILE} names an unexpected run {role!r}: {sub[:100]!r}",
                            hint="the baseline.json was edited or damaged; re-run `qnn-debug baseline`")
    path = fs.real_path(base / sub, what=f"baseline run {role}")
    if path.parent != fs.real_path(base, what="baseline directory"):
        raise BadInputError(f"{base / BASELINE_FILE} points run {role!r} outside the baseline ({sub[:100]!r})",
                            hint="the baseline.json was edited or damaged; re-run `qnn-debug baseline`")
    return path


MNN_USER_DIR = "mnn_user"


def _check_user_mnn(mnn_model: str | os.PathLike[str] | None, fmt: str) -> Path | None:
    if mnn_model is None:
        return None
    if fmt != "onnx":
        raise BadInputError("--mnn-model goes with an .onnx model",
                            hint="for an .mnn alone run `qnn-debug baseline model.mnn` (MNN CPU is then the reference)")
    p = fs.check(mnn_model, what="--mnn-model", kind="file")
    if p.suffix.lower() != ".mnn":
        raise BadInputError(f"--mnn-model {p.name} is not an .mnn file", hint="pass the .mnn you converted from this ONNX model")
    return p


def _gate_user_mnn(report: BaselineReport, user: Path, out: Path, progress: Progress,
                   fp16: Fp16Arithmetic | None) -> None:
    """Run the user's .mnn on MNN CPU, gate it like the converted one (``fp16``: the model's own fp16 error, for an
    fp16 model's limit), and compare the two models."""
    from .runstore import sha256_file
    from .targets.mnn_cpu import run_mnn_cpu

    reference = load_run(out / REFERENCE_DIR)
    floor = load_run(out / FLOOR_DIR) if (out / FLOOR_DIR).is_dir() else None
    from .inputs import PreparedInputs
    from .npz_safe import load_npz

    arrays = load_npz(out / INPUTS_FILE)
    inputs = PreparedInputs(arrays=arrays, shapes={k: list(v.shape) for k, v in arrays.items()}, info=report.inputs)
    from .onnx_graph import ensure_node_names, load_onnx, producer_map

    source = ensure_node_names(load_onnx(report.model))  # its nodes named as the reference named them
    run = run_mnn_cpu(user, inputs, out / MNN_USER_DIR, role="mnn_cpu", progress=progress, source_onnx=source)
    if fp16 is None and report.gate.status == "skipped":  # --no-mnn-gate: not measured yet
        from .inputs import fix_input_shapes

        fp16 = measure_fp16(fix_input_shapes(source, inputs.shapes), reference, arrays)
    with progress.stage("baseline: your .mnn", total=None, message="baseline: comparing your .mnn with ONNX Runtime"):
        gate = gate_report(reference, run, floor, producers=producer_map(source), fp16=fp16)
    converted = out / MNN_DIR / "model.mnn"
    same: bool | None = None
    diffs: list[str] = []
    if converted.is_file():
        diffs = mnn_differences(user, converted)
        if not diffs:  # same structure: the same model iff it computes the same numbers
            worst = _output_difference(run, load_run(out / MNN_DIR), reference)
            if worst is not None and worst > SAME_MODEL_REL:
                diffs = [f"same ops and I/O but different numbers (weights or quantization): outputs differ by "
                         f"{worst:.1e} relative"]
        same = not diffs
    report.mnn_model = MnnModelCheck(path=str(user), sha256=sha256_file(user), run=MNN_USER_DIR, gate=gate,
                                     same_as_converted=same, differences=diffs)
    words = _user_mnn_sentence(report.mnn_model)
    report.sentence = f"{report.sentence} {words}"


def _user_range_sentence(report: BaselineReport) -> str:
    """The fp16 range of the .mnn the user gave (its MNN CPU run), said apart from the ONNX reference's: a rescaled
    .mnn gated against the original ONNX must not be called unsafe for the original's values."""
    user, onnx_ranges = report.mnn_model, report.ranges
    assert user is not None and user.ranges is not None
    name = Path(user.path).name
    top = user.ranges.largest
    peak = f" (largest |value| {top.max_abs:.3g} at `{top.tensor}`)" if top is not None else ""
    if user.ranges.fp16_safe:
        own = f"Your {name} is fp16-safe on these inputs{peak}."
    else:
        own = f"Your {name}: {user.ranges.sentence()}"
    if onnx_ranges is not None and not onnx_ranges.fp16_safe:
        first = onnx_ranges.unsafe[0]
        return (f"{own} (The ONNX reference itself is not: `{first.tensor}` reaches {first.max_abs:.3g}; that is the "
                f"original model's range, not your file's.)")
    return own


def _user_mnn_sentence(check: MnnModelCheck) -> str:
    g = check.gate
    name = Path(check.path).name
    if g.status == "passed":
        fp16 = [o.limit for o in g.outputs if o.limit_rule == "fp16"]
        within = f", within the fp16 limit {max(fp16):.1e} of this fp16 model" if fp16 else ""
        verdict = f"Your {name} agrees with ONNX Runtime ({g.max_rel_error:.1e} on the outputs{within})."
    elif g.status == "failed":
        verdict = (f"Your {name} disagrees with ONNX Runtime ({g.note or 'see mnn_model.gate'}): the .mnn itself is wrong "
                   "before QNN is involved (conversion flags or a converter bug).")
    else:
        verdict = f"Your {name} could not be gated ({g.status}: {g.note})."
    if check.same_as_converted is False:
        verdict += " It differs from the .mnn converted here: " + "; ".join(check.differences[:3]) + "."
    elif check.same_as_converted:
        verdict += " It is the same model as the one converted here."
    return verdict


SAME_MODEL_REL = 1e-6


def _output_difference(a: Run, b: Run, reference: Run) -> float | None:
    """Worst relative difference between two MNN runs on the model's final outputs (None: none shared)."""
    worst: float | None = None
    for name in reference.record.outputs:
        if not (a.has(name) and b.has(name)):
            continue
        err, _ = rel_error(a.array(name), b.array(name))
        if err is None:
            return float("inf")
        worst = err if worst is None else max(worst, err)
    return worst


def mnn_differences(a: Path, b: Path) -> list[str]:
    """How two .mnn models differ in structure (ops, op types, inputs, outputs); empty when they match."""
    from collections import Counter

    from .mnn.model_reader import read_mnn_model

    ma, mb = read_mnn_model(a), read_mnn_model(b)
    diffs: list[str] = []
    if len(ma.ops) != len(mb.ops):
        diffs.append(f"{len(ma.ops)} ops vs {len(mb.ops)} converted here")
    ca, cb = Counter(o.type_name for o in ma.ops), Counter(o.type_name for o in mb.ops)
    changed = sorted(set(ca) | set(cb), key=lambda k: -abs(ca[k] - cb[k]))
    moved = [f"{k} {ca[k]} vs {cb[k]}" for k in changed if ca[k] != cb[k]][:4]
    if moved:
        diffs.append("op types differ: " + ", ".join(moved))
    ia = {i.name: i.shape for i in ma.inputs}
    ib = {i.name: i.shape for i in mb.inputs}
    if ia != ib:
        diffs.append(f"inputs {ia} vs {ib}")
    if list(ma.output_names) != list(mb.output_names):
        diffs.append(f"outputs {list(ma.output_names)} vs {list(mb.output_names)}")
    return diffs


def _model_format(path: Path) -> Literal["onnx", "mnn"]:
    fs.check(path, what="model file", kind="file")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix == ".mnn":
        return "mnn"
    raise BadInputError(f"cannot tell the format of {path.name}", hint="pass an .onnx or .mnn model")


def _prepare_dir(out: Path, force: bool) -> Path:
    """An empty directory for a new baseline; ``force`` replaces a previous *baseline* only."""

    def is_baseline(p: Path) -> bool:
        return (p / BASELINE_FILE).exists() or (p / REFERENCE_DIR).is_dir() or fs.is_claimed(p)

    if check_output_dir(out, force=force, is_ours=is_baseline, what="baseline"):
        for name in (BASELINE_FILE, INPUTS_FILE, REFERENCE_DIR, FLOOR_DIR, MNN_DIR, MNN_USER_DIR):
            entry = out / name
            if entry.is_dir() and ((entry / RUN_FILE).exists() or (entry / TENSOR_DIR).is_dir()):
                shutil.rmtree(entry)
            elif entry.is_file():
                entry.unlink()
    return fs.claim_dir(out, require_empty=False)  # a second writer fails here, before any file is written


def _onnx_baseline(path: Path, out: Path, inputs: str | os.PathLike[str] | None, shapes: dict[str, list[int]] | None,
                   seed: int, progress: Progress, mnn_gate: bool) -> tuple[BaselineReport, Fp16Arithmetic | None]:
    """The ONNX baseline's report, and the model's own fp16 error when it computes in fp16 (the gate's limit)."""
    from .inputs import fix_input_shapes, prepare_inputs, save_npz
    from .onnx_graph import ensure_node_names, graph_inputs, load_onnx, producer_map
    from .runstore import sha256_file
    from .targets.fp16_floor import run_floor
    from .targets.mnn_cpu import run_mnn_cpu
    from .targets.onnx_capture import is_qdq_model
    from .targets.ort_cpu import run_reference

    with progress.stage("baseline: inputs", total=None, message="baseline: loading the model and inputs"):
        model = ensure_node_names(load_onnx(path))
        prepared = prepare_inputs(graph_inputs(model), inputs=inputs, shapes=shapes, seed=seed, model=model)
        fixed = fix_input_shapes(model, prepared.shapes)
        save_npz(out / INPUTS_FILE, prepared.arrays)
    qdq = is_qdq_model(model)
    reference = run_reference(path, fixed, prepared, out / REFERENCE_DIR, progress=progress)
    floor = run_floor(path, fixed, prepared, out / FLOOR_DIR, progress=progress)
    runs = {"reference": REFERENCE_DIR, "fp16_floor": FLOOR_DIR}
    fp16: Fp16Arithmetic | None = None
    if qdq:
        gate = GateReport(status="not_applicable",
                          note="QDQ model: MNN's converter does not carry QDQ graphs over (a 47-node A8W8 model "
                               "became a 1-op .mnn while reporting success), so MNN CPU cannot cross-check it")
        trusted, sentence = True, (
            "Trusted: the reference is ONNX Runtime's fake-quant run of this QDQ model (float DequantizeLinear → op → "
            "QuantizeLinear); ORT's integer kernels are not used because they saturate on CPUs without VNNI.")
    elif not mnn_gate:
        gate = GateReport(status="skipped", note="the MNN CPU gate was switched off")
        trusted, sentence = False, ("Not verified: the MNN CPU gate was not run, so nothing independent confirms "
                                    "the ONNX Runtime reference; run baseline without --no-mnn-gate.")
    else:
        mnn = run_mnn_cpu(path, prepared, out / MNN_DIR, role="mnn_cpu", onnx_model=fixed, progress=progress)
        runs["mnn_cpu"] = MNN_DIR
        with progress.stage("baseline: gate", total=None, message="baseline: comparing MNN CPU with ONNX Runtime"):
            fp16 = measure_fp16(fixed, reference, prepared.arrays)
            gate = gate_report(reference, mnn, floor, producers=producer_map(fixed), fp16=fp16)
        trusted, sentence = _verdict(gate)
    report = BaselineReport(
        model=str(path.resolve()), model_format="onnx", model_sha256=sha256_file(path),
        reference="ort-cpu fake-quant" if qdq else "ort-cpu", qdq_model=qdq, inputs=prepared.info,
        trusted=trusted, sentence=sentence, gate=gate, floor="built", runs=runs,
    )
    return report, fp16


def _mnn_baseline(path: Path, out: Path, inputs: str | os.PathLike[str] | None, shapes: dict[str, list[int]] | None,
                  seed: int, progress: Progress) -> BaselineReport:
    from .inputs import prepare_inputs, save_npz
    from .mnn.model_reader import read_mnn_model
    from .runstore import sha256_file
    from .targets.mnn_cpu import mnn_io, run_mnn_cpu

    with progress.stage("baseline: inputs", total=None, message="baseline: reading the .mnn model and inputs"):
        specs, _ = mnn_io(read_mnn_model(path))
        prepared = prepare_inputs(specs, inputs=inputs, shapes=shapes, seed=seed)
        save_npz(out / INPUTS_FILE, prepared.arrays)
    run_mnn_cpu(path, prepared, out / REFERENCE_DIR, role="reference", progress=progress)
    return BaselineReport(
        model=str(path.resolve()), model_format="mnn", model_sha256=sha256_file(path), reference="mnn-cpu",
        inputs=prepared.info, trusted=True,
        sentence="Trusted as is: MNN CPU fp32 is the reference for an .mnn model; there is no second implementation to check it against.",
        gate=GateReport(status="not_applicable", note=".mnn model: MNN CPU is the reference itself"),
        floor=MNN_FLOOR_UNAVAILABLE,
        runs={"reference": REFERENCE_DIR},
    )


def rel_error(test: np.ndarray, ref: np.ndarray) -> tuple[float | None, float | None]:
    """(max|test-ref| / max|ref|, max|test-ref|); (None, None) when either side is not finite.

    Measured by the project's one comparator (``compare.metrics``), in float64 like the gate always was."""
    return max_rel_error(error_stats(test, ref, wide=True))


def gate_report(reference: Run, mnn: Run, floor: Run | None, *,
                producers: Mapping[str, NodeInfo] | None = None, fp16: Fp16Arithmetic | None = None) -> GateReport:
    """MNN CPU vs ORT CPU on every tensor they share; the final outputs decide.

    ``fp16`` (:func:`qnn_debug.baseline_fp16.measure_fp16`): the model computes in fp16, and each tensor its fp16
    arithmetic reaches is held to the fp16 limit instead of the fp32 one (:func:`qnn_debug.baseline_fp16.gate_limit`).

    Tensors are paired as ``compare`` pairs them (:func:`qnn_debug.compare.align.align`): a fused MNN op's
    output goes with the last model node it covers, which needs the ONNX ``producers``. Besides the worst
    tensor, the first one in graph order beyond its limit is named: errors propagate, so it is the cause."""
    from .compare.align import align, load_in_reference_layout

    alignment = align(reference, mnn, producers=producers)
    mismatches = [u.name for u in alignment.unaligned if u.side == "reference" and u.target_shape is not None]
    worst_name, worst_rel, compared = None, -1.0, 0
    first: tuple[TensorRecord, float | None, float] | None = None
    outputs = set(reference.record.outputs)
    per_output: list[GateOutput] = []
    for pair in alignment.pairs:  # reference (graph) order
        rec = pair.ref
        if rec.kind == "input":
            continue
        ref = reference.array(rec.name)
        if ref.dtype.kind != "f":
            continue
        got = load_in_reference_layout(mnn, pair.other, list(ref.shape))
        compared += 1
        rel, max_abs = rel_error(got, ref)
        score = float("inf") if rel is None else rel
        if score > worst_rel:
            worst_name, worst_rel = rec.name, score
        floor_rel = rel_error(floor.array(rec.name), ref)[0] if floor is not None and floor.has(rec.name) else None
        own = fp16.own.get(rec.name) if fp16 is not None else None
        limit, rule = gate_limit(floor_rel, own)
        if first is None and score > limit and _max_abs(ref) >= NEAR_ZERO:
            first = (rec, rel, limit)
        if rec.name in outputs and pair.alias is None:
            lift = fp16.lift_outputs.get(rec.name) if fp16 is not None else None
            per_output.append(GateOutput(name=rec.name, rel_error=rel, max_abs=max_abs, floor_rel_error=floor_rel,
                                         ref_max_abs=_max_abs(ref), limit=limit,
                                         passed=rel is not None and rel <= limit, limit_rule=rule,
                                         fp16_own_rel_error=own,
                                         fp32_lift_rel_error=None if lift is None else rel_error(got, lift)[0]))
    report = GateReport(status="failed", compared_tensors=compared, shape_mismatches=mismatches[:50],
                        worst_tensor=worst_name, worst_tensor_rel_error=_finite(worst_rel), outputs=per_output,
                        arithmetic="fp32" if fp16 is None else "fp16",
                        limit_why=limit_words(fp16, per_output))
    if first is not None:
        report.first_divergent, report.first_divergent_op = first[0].name, _op_words(first[0])
        report.first_divergent_rel_error, report.first_divergent_limit = first[1], first[2]
    if not per_output:
        report.note = "MNN CPU produced none of the model's final outputs under their ONNX names"
        return report
    rels = [o.rel_error for o in per_output]
    report.max_rel_error = None if any(r is None for r in rels) else max(r for r in rels if r is not None)
    report.status = "passed" if all(o.passed for o in per_output) else "failed"
    if report.status == "passed" and report.first_divergent is not None:
        _not_counted(report)
    return report


def _not_counted(report: GateReport) -> None:
    """A passing gate names no divergent tensor: the one beyond its limit is kept apart, with why it does not count."""
    name, op = report.first_divergent, report.first_divergent_op
    rel, limit = report.first_divergent_rel_error, report.first_divergent_limit
    report.divergent_not_counted = name
    report.not_counted_why = (
        f"{name!r}{f' ({op})' if op else ''} differs by {_rel_words(rel)} (limit {limit or 0:.1e}) under its ONNX name, "
        f"yet every output agrees to {report.max_rel_error or 0:.1e}: MNN holds another value under that name (a fused "
        f"op's output written under it, or a stage its conversion rescaled or reordered), not an error that reaches "
        f"the outputs, so it does not count")
    report.first_divergent = report.first_divergent_op = None
    report.first_divergent_rel_error = report.first_divergent_limit = None


def _op_words(rec: TensorRecord) -> str | None:
    if rec.op is None:
        return None
    return f"{rec.op_type} {rec.op}" if rec.op_type else rec.op


def _max_abs(a: np.ndarray) -> float:
    import numpy as np

    finite = np.abs(np.asarray(a, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if finite.size else 0.0


def _finite(x: float) -> float | None:
    return None if x in (float("inf"), -1.0) else x


def _verdict(gate: GateReport) -> tuple[bool, str]:
    fp16 = any(o.limit_rule == "fp16" for o in gate.outputs)
    if gate.status == "passed" and fp16:
        limit = max(o.limit for o in gate.outputs)
        return True, (f"Trusted: MNN CPU (fp32) and ONNX Runtime (fp16) agree on the final outputs to "
                      f"{gate.max_rel_error:.1e} relative error, within the fp16 limit {limit:.1e}: the model computes "
                      f"in fp16 and that is the size of its own fp16 rounding (see gate.limit_why).")
    if gate.status == "passed":
        return True, (f"Trusted: MNN CPU and ONNX Runtime agree on the final outputs to {gate.max_rel_error:.1e} "
                      f"relative error, well below the fp16 floor.")
    bad = [o for o in gate.outputs if not o.passed]
    if not bad:
        return False, f"Not trusted: {gate.note}."
    o = bad[0]
    if o.rel_error is None:
        return False, (f"Not trusted: output {o.name!r} is NaN or infinite in MNN CPU or ONNX Runtime, so the two "
                       f"fp32 implementations cannot be compared.")
    if o.ref_max_abs < NEAR_ZERO:
        return False, (f"Not trusted: output {o.name!r} is almost zero everywhere for these inputs (max |x| = "
                       f"{o.ref_max_abs:.1e}), so relative errors say nothing; pass realistic inputs with --inputs.")
    if o.limit_rule == "fp16":
        rule = (f"fp16 limit {o.limit:.1e}: twice the {o.fp16_own_rel_error or 0:.1e} by which the model's own fp16 "
                f"arithmetic moves it")
    elif gate.arithmetic == "fp16":
        rule = f"limit {o.limit:.1e}, the fp32 rule although the model computes in fp16: see gate.limit_why"
    else:
        rule = f"limit {o.limit:.1e}"
    return False, (f"Not trusted: MNN CPU and ONNX Runtime disagree on output {o.name!r} by {o.rel_error:.1e} "
                   f"relative error ({rule}), so a QNN error of that size could be the reference's. "
                   f"{_where(gate)}")


def _where(gate: GateReport) -> str:
    """Where the two implementations part: the first divergent tensor (the cause), then the worst."""
    worst = (f"the worst is {gate.worst_tensor!r} ({_rel_words(gate.worst_tensor_rel_error)})"
             if gate.worst_tensor else "")
    if gate.first_divergent is None:
        return f"No tensor before the output exceeds its limit; {worst}." if worst else ""
    op = f", made by {gate.first_divergent_op}" if gate.first_divergent_op else ""
    first = (f"They first differ at {gate.first_divergent!r}{op} ({_rel_words(gate.first_divergent_rel_error)}, "
             f"limit {gate.first_divergent_limit or 0:.1e}): check it first")
    if worst and gate.worst_tensor != gate.first_divergent:
        return f"{first}; {worst}."
    return f"{first}."


def _rel_words(rel: float | None) -> str:
    return "not finite on one side" if rel is None else f"{rel:.1e} relative"
