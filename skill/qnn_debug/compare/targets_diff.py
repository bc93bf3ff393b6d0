"""``compare-targets``: two runs of the same model on two targets, located against each other tensor by tensor.

Each run is compared with the same baseline (no re-runs: only the metrics are needed); the rows are joined by the
reference tensor they stand for, in execution order. The gap is B's SQNR minus A's. A gap that builds up slowly
over many ops is spread loss (each op within its floor); where it *steps up* by STEP_DB over the largest gap seen
before, at a tensor already GAP_DB behind and worse than the fp16 floor allows on A (a gap between two runs both at
fp16 noise, 60 vs 77 dB, is no loss), is where A starts to lose what B keeps: the op to look at first.
"""

from __future__ import annotations

from pathlib import Path

from ..next_step import NextStep, step
from ..progress import NULL_PROGRESS, Progress
from .schema import CompareResult, TensorRow
from .targets_models import TargetGapRow, TargetsComparison

GAP_DB = 6.0
STEP_DB = 3.0


def _rows(result: CompareResult) -> dict[str, TensorRow]:
    """One row per reference tensor: the target's own tensor when it has one, else its best alias."""
    out: dict[str, TensorRow] = {}
    for r in result.tensors:
        key = r.stands_for or r.name
        if key not in out or (r.stands_for is None and out[key].stands_for is not None):
            out[key] = r
    return out


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def join(a: CompareResult, b: CompareResult) -> tuple[list[TargetGapRow], int, int]:
    """The rows both comparisons aligned, in execution order, with the gap and its step."""
    ra, rb = _rows(a), _rows(b)
    shared = sorted(set(ra) & set(rb), key=lambda n: (ra[n].position, n))
    rows: list[TargetGapRow] = []
    worst = 0.0
    for name in shared:
        x, y = ra[name], rb[name]
        sa, sb = x.metrics.get("sqnr_db"), y.metrics.get("sqnr_db")
        gap = None if sa is None or sb is None else round(sb - sa, 3)
        stepped = None if gap is None else round(gap - worst, 3)
        if gap is not None:
            worst = max(worst, gap)
        rows.append(TargetGapRow(name=name, op=x.op or y.op, op_type=x.op_type or y.op_type, position=x.position,
                                 sqnr_a_db=sa, sqnr_b_db=sb, gap_db=gap, step_db=stepped, status_a=x.status,
                                 target_a_name=x.target_name or x.name, target_b_name=y.target_name or y.name))
    return rows, len(set(ra) - set(rb)), len(set(rb) - set(ra))


def compare_targets(baseline: str | Path, target_a: str | Path, target_b: str | Path, *, label_a: str | None = None,
                    label_b: str | None = None, model: str | Path | None = None, mnn_model: str | Path | None = None,
                    progress: Progress = NULL_PROGRESS) -> TargetsComparison:
    """Compare ``target_a`` and ``target_b`` with ``baseline`` and locate where A's error leaves B's."""
    from .options import CompareOptions
    from .pipeline import compare_paths

    opts = CompareOptions(local_checks=False, patterns=False)
    a = compare_paths(baseline, target_a, model=model, mnn_model=mnn_model, options=opts, progress=progress)
    b = compare_paths(baseline, target_b, model=model, mnn_model=mnn_model, options=opts, progress=progress)
    la = label_a or _label(a, target_a)
    lb = label_b or _label(b, target_b)
    rows, only_a, only_b = join(a, b)
    outputs = _outputs(a, rows)
    first = next((r for r in rows if r.gap_db is not None and r.gap_db >= GAP_DB and (r.step_db or 0.0) >= STEP_DB
                  and r.status_a in ("degraded", "bad")), None)
    largest = max((r for r in rows if r.step_db is not None), key=lambda r: r.step_db or 0.0, default=None)
    summary = _summary(la, lb, rows, outputs, first, largest, only_a, only_b)
    return TargetsComparison(baseline=str(baseline), target_a=str(target_a), target_b=str(target_b), label_a=la,
                             label_b=lb, rows=rows, only_a=only_a, only_b=only_b, outputs=outputs, first_gap=first,
                             largest_step=largest if largest is not None and (largest.step_db or 0) > 0 else None,
                             gap_threshold_db=GAP_DB, step_threshold_db=STEP_DB, summary=summary,
                             verdicts={la: f"{a.verdict.kind} ({a.verdict.pattern})",
                                       lb: f"{b.verdict.kind} ({b.verdict.pattern})"},
                             next_steps=_steps(first, baseline, target_a, la))


def _label(result: CompareResult, path: str | Path) -> str:
    from ..runstore import RUN_FILE, load_run

    p = Path(path)
    if (p / RUN_FILE).is_file():
        return load_run(p).record.target or p.name
    return p.name


def _outputs(a: CompareResult, rows: list[TargetGapRow]) -> list[TargetGapRow]:
    from ..runstore import load_run

    try:
        names = set(load_run(Path(a.reference)).record.outputs)
    except Exception:
        names = set()
    return [r for r in rows if r.name in names]


def _summary(la: str, lb: str, rows: list[TargetGapRow], outputs: list[TargetGapRow], first: TargetGapRow | None,
             largest: TargetGapRow | None, only_a: int, only_b: int) -> str:
    outs = "; ".join(f"{o.name}: {la} {_db(o.sqnr_a_db)} vs {lb} {_db(o.sqnr_b_db)} (gap {_db(o.gap_db)})"
                     for o in outputs)
    head = f"{len(rows)} tensors both runs hold ({only_a} only in {la}'s comparison, {only_b} only in {lb}'s)."
    if outs:
        head += f" Outputs: {outs}."
    if first is not None:
        where = (f" {la} first falls {_db(first.gap_db)} behind {lb} at `{first.name}` ({first.op_type or '?'} "
                 f"{first.op or first.name}, {la}'s tensor {first.target_a_name}), a step of {_db(first.step_db)} over "
                 f"the gap before it: look at that op on {la} first.")
    elif any(r.status_a in ("degraded", "bad") for r in rows) and largest is not None and (largest.step_db or 0.0) > 0:
        where = (f" No single op opens a gap of {GAP_DB:g} dB with a step of {STEP_DB:g} dB: the difference builds "
                 f"up over many ops (largest step {_db(largest.step_db)} at `{largest.name}`, {largest.op_type or '?'}"
                 f"), which is precision spread over the graph rather than one wrong op.")
    else:
        where = f" {la} is nowhere {GAP_DB:g} dB behind {lb} where the fp16 floor counts."
    return head + where


def _steps(first: TargetGapRow | None, baseline: str | Path, target_a: str | Path, la: str) -> list[NextStep]:
    if first is None or not first.op_type:
        return []
    return [step("lookup_op_constraints", ["op", first.op_type, "--probe"],
                 f"{la} loses against the other target first at {first.op_type} {first.op or first.name}: check its "
                 f"QNN/HTP constraints and MNN's translation of it."),
            step("compare", ["compare", str(baseline), str(target_a)],
                 f"{la}'s own comparison with the baseline, with the op re-run on CPU (local checks), to tell a wrong "
                 f"op from fp16 at that place.")]
