"""One probe: the target's values at a cut, judged against the reference and the fp16 floor; and the search.

A probe is **bad** when some frontier tensor is beyond the floor by the verdict's own jump gate
(``Thresholds.jump_db``, with the floor capped at ``floor_cap_db``): exactly how ``compare`` calls a
tensor ``bad`` (:func:`qnn_debug.compare.localise.judge_tensor`), so both methods judge alike.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..compare.localise import judge_tensor
from ..compare.metrics import error_stats, metric_values
from ..compare.thresholds import Thresholds
from .models import Probe, ProbeTensor


def judge(name: str, target: np.ndarray, reference: np.ndarray, floor: np.ndarray | None, op_type: str | None,
          th: Thresholds) -> ProbeTensor:
    """One tensor: SQNR of target and floor against the reference, excess and status as ``compare`` has them."""
    ref = np.asarray(reference)
    tgt = np.asarray(target)
    if tgt.size != ref.size:
        return ProbeTensor(name=name, status="bad", excess_db=th.jump_db)
    metrics = metric_values(error_stats(tgt.reshape(ref.shape), ref, atol=th.atol, rtol=th.rtol))
    floor_metrics = None
    if floor is not None and np.asarray(floor).size == ref.size:
        floor_metrics = metric_values(error_stats(np.asarray(floor).reshape(ref.shape), ref, atol=th.atol, rtol=th.rtol))
    verdict = judge_tensor(metrics, floor_metrics, op_type, th)
    return ProbeTensor(name=name, target_sqnr_db=metrics.get("sqnr_db"),
                       floor_sqnr_db=(floor_metrics or {}).get("sqnr_db"),
                       excess_db=None if verdict.excess_db is None else round(verdict.excess_db, 2),
                       status=verdict.status, max_abs_ref=metrics.get("max_abs_ref"))


def summarise(index: int, position: int, op: str, op_type: str, tensors: list[ProbeTensor], seconds: float) -> Probe:
    judged = [t for t in tensors if t.excess_db is not None]
    worst = max(judged, key=lambda t: t.excess_db or 0.0) if judged else None
    bad = [t.name for t in tensors if t.status == "bad"]
    return Probe(index=index, position=position, op=op, op_type=op_type, frontier=len(tensors), bad=bool(bad),
                 worst=worst, bad_tensors=bad, seconds=round(seconds, 3))


def first_bad(count: int, probe: Callable[[int], Probe], outputs_ok_db: float | None = None,
              ) -> tuple[int | None, list[Probe]]:
    """Binary search for the first bad cut among ``count`` (about log2(count) + 1 probes).

    The last cut (the final outputs) is probed first: when it is healthy there is nothing to find. Healthy for the
    outputs is ``compare``'s own rule, within ``outputs_ok_db`` of the floor (``Thresholds.excess_ok_db``): a broken
    rotary two layers before the head of a 28-layer decoder left the logits 13.4 dB beyond the floor (every tensor
    after it 13-14 dB), under the 15 dB an intermediate tensor needs to be ``bad``, and the search never started.
    When only that output rule fails, a cut fails at ``outputs_ok_db`` too, and the cut found is named only if the
    excess steps up there (by at least half that, from the last good cut): a slow fp16 drift has no such step and
    stays unnamed (precision). The graph inputs are taken as good (the target ran on the reference's inputs).
    """
    if count <= 0:
        return None, []
    probes = [probe(count - 1)]
    final = probes[0]
    off = (outputs_ok_db is not None and final.worst is not None and final.worst.excess_db is not None
           and final.worst.excess_db >= outputs_ok_db)
    if not final.bad and not off:
        return None, probes

    def excess(p: Probe | None) -> float:
        return (p.worst.excess_db or 0.0) if p is not None and p.worst is not None else 0.0

    def failing(p: Probe) -> bool:
        return p.bad or (not final.bad and outputs_ok_db is not None and excess(p) >= outputs_ok_db)

    lo, hi = -1, count - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = probe(mid)
        probes.append(p)
        lo, hi = (lo, mid) if failing(p) else (mid, hi)
    if not final.bad and outputs_ok_db is not None:
        at = next((p for p in probes if p.index == hi), None)
        before = next((p for p in probes if p.index == lo), None)
        if excess(at) - excess(before) < outputs_ok_db / 2:
            return None, probes  # outputs off without a step anywhere: nothing to name (precision)
    return hi, probes
