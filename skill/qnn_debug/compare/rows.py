"""The metrics stage: one judged row per aligned pair, streamed from the files, plus what the rows say about
the inputs and the target's precision.

Every pair (and its fp16-floor pair) is measured by the one comparator (:mod:`.metrics`), a few tensors at a
time, chunk by chunk from the files; each row is then judged against the floor (excess, status). The graph
inputs' rows tell whether the target saw the reference's inputs (:mod:`.input_checks`), and the rows plus the
target's records and models tell whether it is quantized (:mod:`.quant_detect`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..progress import NULL_PROGRESS, Progress
from ..runstore import Run
from .align import Aligned, Pair, prefetch_pair, shared_reference_stats
from .importers import ReferenceSide
from .input_checks import check_inputs, uncompared
from .localise import judge_tensor
from .metrics import ScratchArrays, metric_values
from .options import CompareOptions
from .quant_detect import detect as detect_quantization
from .schema import MetricValues, TensorRow
from .stage_types import Measured
from .thresholds import Thresholds

PREFETCH_AHEAD = 4  # tensors whose files the kernel reads ahead of the comparison


def measure(side: ReferenceSide, target: Run, aligned: Aligned, opts: CompareOptions, *, model: Any = None,
            mnn_model: str | None = None, backend: bool = False, progress: Progress = NULL_PROGRESS) -> Measured:
    """Rows for every aligned pair, judged against the floor; ``backend``: the target is an MNN dump (its
    copies of the inputs are the backend's, not what it was fed)."""
    th = opts.thresholds
    all_rows: list[TensorRow] = []
    with progress.stage("compare: tensors", total=len(aligned.pairs), message="compare: metrics per tensor") as advance:
        for pair, values, floor_values in stream_metrics(side, target, aligned.pairs, aligned.floor_pairs, opts):
            all_rows.append(_row(pair, values, floor_values, th))
            advance()
    detection = detect_quantization(target, all_rows, model, mnn_model=mnn_model)
    quantized = target.record.precision == "quantized" or any(r.quantized for r in all_rows) or detection.quantized
    ref = side.reference
    zeroed, mismatches, input_warnings = check_inputs(ref, target, aligned.pairs, all_rows, th, backend=backend)
    unseen = uncompared(aligned.unaligned, aligned.pairs, all_rows)
    warnings = [*input_warnings, *_disagreements(all_rows, th), *(f"not compared: {u}" for u in unseen)]
    bad_ref = sorted({r.stands_for or r.name for r in all_rows if (r.metrics.get("ref_nonfinite") or 0) > 0})
    if bad_ref:
        warnings.append(f"the reference has NaN/Inf in {len(bad_ref)} tensor(s), which were not judged: "
                        + ", ".join(bad_ref[:5]))
    return Measured(all_rows=all_rows, rows=first_observations(all_rows), quantized=quantized, detection=detection,
                    zero_inputs=zeroed, input_mismatches=mismatches, uncompared=unseen, warnings=warnings)


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
