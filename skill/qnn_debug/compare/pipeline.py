"""``compare_runs``: reference (+ fp16 floor) vs target → metrics per tensor, first failing op, verdict.

Pipeline: align by name and layout → stream metrics for target and floor (a few tensors at a time,
chunk by chunk from the files) → check the inputs → excess over the floor per tensor → suspects where the excess jumps
→ re-run each suspect on the target's inputs (local error) until one is wrong → test which wrong
semantics reproduce it → verdict. ``compare_paths`` adds the file handling around it (baseline dirs,
MNN dumps, ``.npz`` targets, report files).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError
from ..htp_fp16 import Fp16Codes
from ..onnx_graph import is_floor_helper
from ..progress import NULL_PROGRESS, Progress
from ..runstore import MNN_DIR, Run, atomic_write_text, sha256_file
from . import fmt
from .align import DEFAULT_CHUNK, Pair, align, prefetch_pair, shared_reference_stats
from .checks import quant_step
from .fusion import fused_words, name_target_op
from .importers import ReferenceSide, open_reference, open_target, target_kind
from .localize import OpNode, find_suspects, judge_tensor, ops_without_graph
from .metrics import ScratchArrays, metric_values
from .next_steps import next_steps
from .overflow import find_overflow, reference_maxima
from .quant_detect import detect as detect_quantization
from .quant_detect import find_range_clip
from .schema import CompareResult, MetricValues, TensorRow, UnalignedRow
from .thresholds import Thresholds
from .verdict import Finding, Findings, InputMismatch, decide

PREFETCH_AHEAD = 4  # tensors whose files the kernel reads ahead of the comparison


class CompareOptions(BaseModel):
    thresholds: Thresholds = Field(default_factory=Thresholds)
    chunk: int = DEFAULT_CHUNK  # elements per streamed chunk
    threads: int = Field(default_factory=lambda: min(2, os.cpu_count() or 1))  # tensors compared at once
    local_checks: bool = True  # re-run suspects on CPU (needs the ONNX model)
    patterns: bool = True  # test alternative semantics on a confirmed bug


def compare_paths(reference: str | Path, target: str | Path, *, model: str | Path | None = None,
                  mnn_model: str | Path | None = None, execution: int | None = None,
                  report_dir: str | Path | None = None, json_path: str | Path | None = None,
                  options: CompareOptions | None = None, progress: Progress = NULL_PROGRESS,
                  fp16_codes: Fp16Codes = "htp") -> CompareResult:
    """Compare TARGET (run dir, MNN dump dir or ``.npz``) with REFERENCE (baseline or run dir).

    ``fp16_codes`` says how an MNN dump's FLOAT_16 buffers encode exponent-31 codes: ``htp`` (finite, up to
    131008; HTP has no inf/NaN) or ``ieee`` (inf/NaN, for an IEEE-fp16 producer)."""
    side = open_reference(reference)
    kind = target_kind(target)
    report = Path(report_dir) if report_dir is not None else None
    if json_path is not None:
        _check_json_path(Path(json_path))
    with contextlib.ExitStack() as stack:
        if kind == "run":
            work = Path(target)
        elif report is not None:
            work = report / "target_run"
        else:
            work = stack.enter_context(fs.scratch("qnn-debug-target-"))
        guess = mnn_model or _mnn_model_guess(side, model)
        run, kind = open_target(target, reference=side.reference, work_dir=work,
                                mnn_model=Path(guess) if guess else None, execution=execution, progress=progress,
                                fp16_codes=fp16_codes)
        onnx_model, model_path, note = resolve_model(side.reference, model)
        result = compare_runs(side, run, model=onnx_model, model_path=model_path, target_kind=kind,
                              options=options, progress=progress, model_note=note,
                              mnn_model=str(guess) if guess else None)
        result.target = str(target)
        result.next_steps = next_steps(result)  # its commands name the target as the user gave it
        if report is not None:
            from .report import write_report

            result.report_files = write_report(result, report)
        if json_path is not None:
            atomic_write_text(Path(json_path), result.model_dump_json(indent=1))
        return result


def _check_json_path(path: Path) -> None:
    if path.is_dir():
        raise BadInputError(f"--json {path} is a directory", hint="give a file name, or `--json -` for stdout")
    if path.exists() and path.suffix.lower() != ".json":
        raise BadInputError(f"refusing to overwrite {path} with the JSON result (it is not a .json file)",
                            hint="give a new file name ending in .json, or `--json -` for stdout")


def _usable(path: Path) -> bool:
    """A path found inside our own files (run.json) that the roots allow and that is a regular file."""
    try:
        fs.check(path, what="model", kind="file")
    except BadInputError:
        return False
    return True


def _mnn_model_guess(side: ReferenceSide, model: str | Path | None) -> Path | None:
    """The .mnn that names t<N> in an MNN dump: --model if it is one, else the baseline's converted model."""
    if model is not None and Path(model).suffix.lower() == ".mnn":
        return Path(model)
    info = side.reference.record.model
    if info is not None and info.format == "mnn" and Path(info.path).exists() and _usable(Path(info.path)):
        return Path(info.path)
    if side.baseline_dir is not None:
        found = sorted((side.baseline_dir / MNN_DIR).glob("*.mnn"))
        if found:
            return found[0]
    return None


def resolve_model(reference: Run, model: str | Path | None) -> tuple[Any, str | None, str | None]:
    """(onnx model or None, its path, why there is none). A given model must be the reference's own."""
    from ..onnx_graph import load_onnx

    info = reference.record.model
    if model is not None and Path(model).suffix.lower() != ".mnn":
        path = Path(model)
        loaded = load_onnx(path)
        if info is not None and info.format == "onnx" and info.sha256 and sha256_file(path) != info.sha256:
            raise BadInputError(
                f"--model {path} is not the model the reference was built from ({info.path})",
                hint="pass the model given to `qnn-debug baseline`, or leave --model out to use it",
            )
        return loaded, str(path), None
    if info is None or info.format != "onnx":
        return None, None, "no ONNX model for this reference (pass --model MODEL.onnx to re-run ops)"
    path = Path(info.path)
    if not path.exists():
        return None, None, f"the reference's model {path} no longer exists (pass --model)"
    try:  # a path read from run.json is checked like any argument: inside the roots, a regular file
        fs.check(path, what="the reference's model", kind="file")
    except BadInputError as e:
        return None, None, f"{e.message} (pass --model)"
    if info.sha256 and sha256_file(path) != info.sha256:
        return None, None, f"the reference's model {path} changed since the baseline (pass --model)"
    return load_onnx(path), str(path), None


def compare_runs(side: ReferenceSide, target: Run, *, model: Any = None, model_path: str | None = None,
                 target_kind: str = "run", options: CompareOptions | None = None,
                 progress: Progress = NULL_PROGRESS, model_note: str | None = None,
                 mnn_model: str | None = None) -> CompareResult:
    """The comparison itself, on loaded runs; ``model`` (an ONNX ModelProto) enables local re-runs;
    ``mnn_model`` (the target's .mnn) is read for quant attributes."""
    t_start = time.monotonic()
    opts = options or CompareOptions()
    th = opts.thresholds
    ref = side.reference
    producers = None
    if model is not None:
        from ..onnx_graph import producer_map

        producers = producer_map(model)
    alignment = align(ref, target, producers=producers)
    if not alignment.pairs:
        raise BadInputError(
            f"none of the {len(ref.tensors)} reference tensors is in the target ({len(target.tensors)} tensors)",
            hint="is the target a run of the same model? Tensors are matched by their model names",
            details={"reference_names": ref.names()[:10], "target_names": target.names()[:10]},
        )
    floor_pairs: dict[str, Pair] = {}
    if side.floor is not None:
        floor_pairs = {p.name: p for p in align(ref, side.floor, ignore=is_floor_helper).pairs}
    _check_input_hashes(ref, target, alignment.pairs)

    all_rows: list[TensorRow] = []
    with progress.stage("compare: tensors", total=len(alignment.pairs), message="compare: metrics per tensor") as advance:
        for pair, values, floor_values in stream_metrics(side, target, alignment.pairs, floor_pairs, opts):
            all_rows.append(_row(pair, values, floor_values, th))
            advance()
    rows = first_observations(all_rows)  # reference name -> the row localisation uses

    detection = detect_quantization(target, all_rows, model, mnn_model=mnn_model)
    quantized = target.record.precision == "quantized" or any(r.quantized for r in all_rows) or detection.quantized
    zeroed, mismatches, input_warnings = _check_inputs(ref, target, alignment.pairs, all_rows, th,
                                                       backend=target_kind == "mnn-dump")
    uncompared = _uncompared(alignment.unaligned, alignment.pairs, all_rows)
    ops, non_float, index, local_note = _graph(model, ref, opts, model_note)
    excess = {n: r.excess_db for n, r in rows.items()}
    for name in non_float:
        excess.pop(name, None)
    suspects, jumps = find_suspects(ops, excess, th, exact=non_float)
    for name, jump in jumps.items():
        if name in rows:
            rows[name].jump_db = round(jump, 2)

    findings: list[Finding] = []
    if suspects and index is not None:
        from .checks import check_suspect

        observed_as = {n: r.name for n, r in rows.items()}
        with progress.stage("compare: local error", total=min(len(suspects), th.max_local_checks),
                            message="compare: re-running suspect ops on CPU") as advance:
            for suspect in suspects[: th.max_local_checks]:
                finding = check_suspect(index, suspect, ref, target, quantized=quantized, th=th,
                                        patterns=opts.patterns, observed_as=observed_as)
                findings.append(finding)
                advance()
                if finding.local is not None and finding.local.ok is False:
                    break
    else:
        findings = [Finding(s, None) for s in suspects]
    overflow, range_clip = None, None
    if quantized:
        range_clip = find_range_clip(rows, ref, target, detection.model_encodings)
    else:
        overflow = find_overflow(ops, rows, reference_maxima(all_rows, ref), ref, target,
                                 model_nodes=index.nodes if index is not None else None)
    consumers: dict[str, OpNode] = {}
    for op in ops:
        for name in op.inputs:
            consumers.setdefault(name, op)
    fs = Findings(rows=rows, findings=findings, quantized=quantized, outputs=list(ref.record.outputs),
                  zero_inputs=list(zeroed), zero_observations=zeroed, input_consumers=consumers,
                  input_mismatches=mismatches, uncompared=uncompared,
                  local_unavailable=local_note,
                  observer_effect_db=target.record.observer_effect_db, has_floor=side.floor is not None,
                  all_rows=all_rows, overflow=overflow, range_clip=range_clip, quantized_by=detection.sources)
    verdict, first = decide(fs, th)
    if first is not None:
        produced = {o for op in ops for o in op.outputs}
        graph_inputs = {i for op in ops for i in op.inputs if i not in produced}
        first = name_target_op(first, target, ops, set(rows) | graph_inputs)
        if first.fused is not None:
            verdict.summary += fused_words(first)
            verdict.evidence["fused_op"] = first.fused.model_dump()
    if len(suspects) > len(findings):
        verdict.evidence["unchecked_suspects"] = [
            {"tensor": s.tensor, "op": s.op.name, "jump_db": round(s.jump_db, 1)} for s in suspects[len(findings):][:5]]
    warnings = [*target.record.warnings, *input_warnings, *_disagreements(all_rows, th),
                *(f"not compared: {u}" for u in uncompared)]
    bad_ref = sorted({r.stands_for or r.name for r in all_rows if (r.metrics.get("ref_nonfinite") or 0) > 0})
    if bad_ref:
        warnings.append(f"the reference has NaN/Inf in {len(bad_ref)} tensor(s), which were not judged: "
                        + ", ".join(bad_ref[:5]))
    if local_note:
        warnings.append(f"local error not computed: {local_note}")
    ordered = sorted(all_rows, key=lambda r: r.position)
    result = CompareResult(
        reference=str(ref.dir), target=str(target.dir), target_kind=target_kind,
        floor=str(side.floor.dir) if side.floor is not None else None, model=model_path,
        precision=target.record.precision, first_failing=first, verdict=verdict, tensors=ordered,
        observer_effect_db=target.record.observer_effect_db, unaligned=alignment.unaligned,
        counts={"reference_tensors": len(ref.tensors), "target_tensors": len(target.tensors),
                "aligned": len(all_rows), "aliases": sum(r.stands_for is not None for r in all_rows),
                "unaligned": len(alignment.unaligned), "suspects": len(suspects),
                "local_checks": sum(f.local is not None for f in findings),
                "floor_aligned": sum(r.floor_metrics is not None for r in all_rows)},
        warnings=warnings, thresholds=th.model_dump(), elapsed_s=round(time.monotonic() - t_start, 3),
    )
    result.next_steps = next_steps(result)
    return result


def _row(pair: Pair, values: MetricValues, floor_values: MetricValues | None, th: Thresholds) -> TensorRow:
    """One row, judged against the floor; alias rows are labelled with the reference tensor they stand for."""
    rec = pair.ref
    alias = pair.alias is not None
    row = TensorRow(name=pair.name, op=rec.op, op_type=rec.op_type, position=rec.position,
                    metrics=values, floor_metrics=floor_values,
                    layout=None if pair.layout == "same" else pair.layout,
                    target_name=pair.other.target_name, quantized=pair.other.quant is not None,
                    stands_for=rec.name if alias else None, equivalence=pair.alias,
                    label=f"{pair.name} ≡ {rec.name}" if alias else None)
    judged = judge_tensor(row.metrics, row.floor_metrics, rec.op_type, th)
    row.excess_db = None if judged.excess_db is None else round(judged.excess_db, 2)
    row.status = judged.status
    return row


def first_observations(rows: list[TensorRow]) -> dict[str, TensorRow]:
    """Reference name → its first observation in the target's execution order (rows come in that order).

    Localisation and local re-runs use it: the earliest point the value was seen is the op's own output,
    before any backend copy.
    """
    first: dict[str, TensorRow] = {}
    for row in rows:
        first.setdefault(row.stands_for or row.name, row)
    return first


def _disagreements(rows: list[TensorRow], th: Thresholds) -> list[str]:
    """Observations of one reference tensor that differ by a jump: a backend copy or cast changed the values."""
    groups: dict[str, list[TensorRow]] = {}
    for row in rows:
        if row.excess_db is not None:
            groups.setdefault(row.stands_for or row.name, []).append(row)
    out = []
    for name, group in groups.items():
        lo = min(group, key=lambda r: r.excess_db or 0.0)
        hi = max(group, key=lambda r: r.excess_db or 0.0)
        if (hi.excess_db or 0.0) - (lo.excess_db or 0.0) >= th.jump_db:
            out.append(f"observations of {name!r} disagree: {hi.name!r} is {hi.excess_db} dB beyond the floor, "
                       f"{lo.name!r} {lo.excess_db} dB (a backend copy or cast changed the values)")
    return out


def stream_metrics(side: ReferenceSide, target: Run, pairs: list[Pair], floor_pairs: dict[str, Pair],
                   opts: CompareOptions) -> Iterator[tuple[Pair, MetricValues, MetricValues | None]]:
    """Metrics of every pair (and its floor pair), in order, computed on ``opts.threads`` threads.

    Each thread owns a workspace; numpy and BLAS release the GIL, so two tensors are compared at once.
    The kernel is told to read the next pairs' files ahead while the current ones are computed.
    """
    th = opts.thresholds
    local = threading.local()

    def one(pair: Pair) -> tuple[Pair, MetricValues, MetricValues | None]:
        ws = getattr(local, "ws", None)
        if ws is None:
            ws = local.ws = ScratchArrays()
        fp = floor_pairs.get(pair.ref.name)
        others = [(target, pair)]
        if fp is not None and side.floor is not None:
            others.append((side.floor, fp))  # the reference file is read once for both
        stats = shared_reference_stats(side.reference, others, atol=th.atol, rtol=th.rtol, chunk=opts.chunk, ws=ws)
        return pair, metric_values(stats[0]), metric_values(stats[1]) if len(stats) > 1 else None

    for ahead in pairs[:PREFETCH_AHEAD]:
        prefetch_pair(side.reference, target, ahead)
    with ThreadPoolExecutor(max_workers=max(1, opts.threads), thread_name_prefix="qnn-debug-compare") as pool:
        pending: deque[Future[tuple[Pair, MetricValues, MetricValues | None]]] = deque()
        for i, pair in enumerate(pairs):
            if i + PREFETCH_AHEAD < len(pairs):  # keep the disk busy while these pairs are computed
                prefetch_pair(side.reference, target, pairs[i + PREFETCH_AHEAD])
            pending.append(pool.submit(one, pair))
            if len(pending) > 2 * opts.threads:  # bounded: never more than a few tensors in flight
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _graph(model: Any, ref: Run, opts: CompareOptions,
           model_note: str | None) -> tuple[list[OpNode], set[str], Any, str | None]:
    """Ops in execution order, non-float tensor names, a ModelIndex for re-runs, and why none."""
    if model is None:
        order = [(t.name, t.op, t.op_type, t.position) for t in ref.iter_in_order()]
        return ops_without_graph(order), set(), None, model_note or "no ONNX model"
    from ..onnx_graph import initializer_names, nodes_in_order
    from .local_error import ModelIndex

    index = ModelIndex.build(model)
    inits = initializer_names(index.model)
    ops = [OpNode(n.position, n.name, n.op_type, tuple(i for i in n.inputs if i and i not in inits), n.outputs)
           for n in nodes_in_order(index.model)]
    non_float = {name for name in index.elem_types if not index.is_float(name)}
    return ops, non_float, index if opts.local_checks else None, None if opts.local_checks else "local checks switched off"


def _check_input_hashes(ref: Run, target: Run, pairs: list[Pair]) -> None:
    """Runs on different inputs cannot be compared; say so unless the inputs themselves are in the target."""
    a, b = ref.record.inputs, target.record.inputs
    if a is None or b is None or not a.sha256 or not b.sha256 or a.sha256 == b.sha256:
        return
    if any(p.ref.kind == "input" and p.alias is None for p in pairs):
        return  # the input tensors are compared directly (see _check_inputs)
    raise BadInputError(
        f"the target ran on different inputs than the reference (input sha256 {b.sha256[:12]} vs {a.sha256[:12]})",
        hint="re-run the target with the baseline's inputs.npz (--inputs BASELINE_DIR/inputs.npz)",
    )


def _check_inputs(ref: Run, target: Run, pairs: list[Pair], rows: list[TensorRow], th: Thresholds, *,
                  backend: bool = False) -> tuple[dict[str, list[str]], list[InputMismatch], list[str]]:
    """Graph inputs the target holds as zeros (→ the observations that are), inputs whose first observation
    is a backend copy that differs otherwise, and warnings.

    A graph input recorded under its own name in a run or ``.npz`` (``backend`` False) is what the target
    was fed: if it differs, the target ran on other data (an error). A backend copy (an alias, or anything in
    an MNN dump) that differs cannot tell other baseline data from an input that was never copied, so it
    becomes a finding when it is the input's first observation and a warning always.
    """
    inputs = [(pair, row) for pair, row in zip(pairs, rows, strict=True) if pair.ref.kind == "input"]
    zeros: dict[str, list[str]] = {}
    for pair, _ in inputs:
        arr = target.array(pair.other.name)
        if arr.size and not np.any(arr) and np.any(ref.array(pair.ref.name)):
            zeros.setdefault(pair.ref.name, []).append(pair.name)
    warnings: list[str] = []
    mismatches: dict[str, InputMismatch] = {}
    seen: set[str] = set()
    for pair, row in inputs:
        name = pair.ref.name
        first = name not in seen
        seen.add(name)
        if name in zeros or not _input_differs(pair, row, th):
            continue
        nonfinite = int((row.metrics.get("nan") or 0) + (row.metrics.get("inf") or 0))
        how = (f"holds NaN/Inf ({nonfinite} of {_size(pair)} values)" if nonfinite else
               f"differs from the reference input (SQNR {fmt.db_unit(row.metrics.get('sqnr_db'))})")
        if pair.alias is None and pair.other.kind != "stage" and not backend:
            raise BadInputError(
                f"the target ran on a different input {name!r}: the target's {name!r} {how}",
                hint="rebuild the baseline with the inputs the target used (`qnn-debug baseline MODEL --inputs "
                     "INPUTS_NPZ_OR_TESTDIR`), or re-run the target with the baseline's inputs.npz "
                     "(--inputs BASELINE_DIR/inputs.npz)",
                details={"input": name, "metrics": row.metrics},
            )
        warnings.append(f"the target's copy {pair.name!r} of input {name!r} {how}: other data, or the copy is broken")
        if first:
            mismatches[name] = InputMismatch(name, pair.name, row.metrics.get("sqnr_db"),
                                             constant=_constant(target, pair), nonfinite=nonfinite, size=_size(pair))
    return zeros, list(mismatches.values()), warnings


def _input_differs(pair: Pair, row: TensorRow, th: Thresholds) -> bool:
    """Beyond the floor by a jump, unless it is only the input quantized onto the target's grid."""
    if row.excess_db is None or row.excess_db < th.jump_db:
        return False
    step = quant_step(pair.other.quant)
    return not (step is not None and (row.metrics.get("max_abs") or 0.0) <= 1.01 * step)


def _size(pair: Pair) -> int:
    return int(np.prod(pair.other.shape, dtype=np.int64))


def _constant(target: Run, pair: Pair) -> float | None:
    """The copy's single value when all its (finite) elements are equal: a fill, not data."""
    arr = np.asarray(target.array(pair.other.name), dtype=np.float64).reshape(-1)
    if arr.size < 2 or not np.all(np.isfinite(arr)):
        return None
    lo, hi = float(arr.min()), float(arr.max())
    return lo if lo == hi else None


def _uncompared(unaligned: list[UnalignedRow], pairs: list[Pair], rows: list[TensorRow]) -> list[str]:
    """Model tensors the target holds but that could not be judged: a misfit shape, empty, or only NaN/Inf.

    Tensors simply missing from the target (fused away, not dumped) are normal and are not listed here.
    """
    out = [f"{u.name!r}: target shape {u.target_shape} vs reference {u.reference_shape}"
           + (" (empty)" if u.target_shape is not None and 0 in u.target_shape else "")
           for u in unaligned if u.side == "reference" and u.target_shape is not None]
    for pair, row in zip(pairs, rows, strict=True):
        m = row.metrics
        bad = (m.get("nan") or 0) + (m.get("inf") or 0)
        if bad and bad >= _size(pair) and not (m.get("ref_nonfinite") or 0):
            out.append(f"{row.label or row.name!r}: the target holds only NaN/Inf ({int(bad)} values), no value to compare")
    return out
