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


def excess(p: Probe | None) -> float:
    """A probe's worst excess over the floor (0 when nothing was judged)."""
    return (p.worst.excess_db or 0.0) if p is not None and p.worst is not None else 0.0


def outputs_rule(outputs_ok_db: float) -> Callable[[Probe], bool]:
    """A cut fails ``compare``'s output rule: bad, or beyond the floor by ``outputs_ok_db`` (degraded)."""
    return lambda p: p.bad or excess(p) >= outputs_ok_db


def searching(final: Probe, outputs_ok_db: float | None) -> bool:
    """Whether the last cut (the final outputs) calls for a search at all: bad, or off by the outputs' rule."""
    return final.bad or (outputs_ok_db is not None and final.worst is not None and final.worst.excess_db is not None
                         and final.worst.excess_db >= outputs_ok_db)


def failing_rule(final: Probe, outputs_ok_db: float | None) -> Callable[[Probe], bool]:
    """The first search's rule: bad, or (when only the outputs' rule failed) at ``outputs_ok_db`` too."""
    if final.bad or outputs_ok_db is None:
        return lambda p: p.bad
    return outputs_rule(outputs_ok_db)


def crossed_late(final: Probe, before: Probe | None, outputs_ok_db: float) -> bool:
    """Whether the cut the bad-tensor search named only crossed the jump line: the cut before it was already beyond
    the outputs' rule, so the error was there before it. Seen at 1.7B width x 28 layers: a rotary broken in layer
    26 left every later tensor 14.3 dB beyond the floor (degraded, under the 15 dB of ``bad``) and the logits at
    15.1 dB, and the search named the head's last-token Slice, 0.8 dB past the residual before it."""
    return final.bad and excess(before) >= outputs_ok_db


def narrowest(path: list[Probe], upto: int, failing: Callable[[Probe], bool]) -> tuple[int, int]:
    """The tightest (passing, failing) pair of cuts already on the search's path at or below ``upto`` (a failing
    cut): where a second search under another rule starts without probing again what the path judged."""
    good = max((p.index for p in path if p.index < upto and not failing(p)), default=-1)
    bad = min((p.index for p in path if good < p.index <= upto and failing(p)), default=upto)
    return good, bad


def stepped(at: Probe | None, before: Probe | None, outputs_ok_db: float) -> bool:
    """A cut found under the outputs' rule is named only where the excess steps up (by half that rule)."""
    return excess(at) - excess(before) >= outputs_ok_db / 2


def first_bad(count: int, probe: Callable[[int], Probe], outputs_ok_db: float | None = None,
              ) -> tuple[int | None, list[Probe]]:
    """Binary search for the first bad cut among ``count`` (about log2(count) + 1 probes).

    The last cut (the final outputs) is probed first: when it is healthy there is nothing to find. Healthy for the
    outputs is ``compare``'s own rule, within ``outputs_ok_db`` of the floor (``Thresholds.excess_ok_db``): a broken
    rotary two layers before the head of a 28-layer decoder left the logits 13.4 dB beyond the floor (every tensor
    after it 13-14 dB), under the 15 dB an intermediate tensor needs to be ``bad``, and the search never started.
    When only that output rule fails, a cut fails at ``outputs_ok_db`` too, and the cut found is named only if the
    excess steps up there (by at least half that, from the last good cut): a slow fp16 drift has no such step and
    stays unnamed (precision). When the outputs are bad but the cut found had a degraded cut before it
    (:func:`crossed_late`), the search goes on below it under the outputs' rule, and names the cut where that
    error steps up, if there is one. The graph inputs are taken as good (the target ran on the reference's inputs).
    """
    if count <= 0:
        return None, []
    probes = [probe(count - 1)]
    final = probes[0]
    if not searching(final, outputs_ok_db):
        return None, probes

    def search(lo: int, hi: int, fails: Callable[[Probe], bool]) -> tuple[int, int]:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            p = probe(mid)
            probes.append(p)
            lo, hi = (lo, mid) if fails(p) else (mid, hi)
        return lo, hi

    lo, hi = search(-1, count - 1, failing_rule(final, outputs_ok_db))
    return conclude(final, probes, lo, hi, search, outputs_ok_db), probes


Search = Callable[[int, int, Callable[[Probe], bool]], tuple[int, int]]  # (lo, hi, failing) -> (lo, hi) at the end


def conclude(final: Probe, path: list[Probe], lo: int, hi: int, search: Search, outputs_ok_db: float | None,
             ) -> int | None:
    """The cut to name once the first search ended between ``lo`` and ``hi`` (``path``: its probes, which a second
    ``search`` extends): see :func:`first_bad`. Shared by the serial search and the rounds (:mod:`.rounds`)."""

    def at(i: int) -> Probe | None:
        return next((p for p in path if p.index == i), None)

    if outputs_ok_db is None:
        return hi
    if not final.bad:  # outputs off without a step anywhere: nothing to name (precision)
        return hi if stepped(at(hi), at(lo), outputs_ok_db) else None
    if crossed_late(final, at(lo), outputs_ok_db):
        rule = outputs_rule(outputs_ok_db)
        lo2, hi2 = search(*narrowest(path, lo, rule), rule)
        if stepped(at(hi2), at(lo2), outputs_ok_db):
            return hi2
    return hi
