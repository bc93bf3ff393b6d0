"""The bisection of :func:`.probe.first_bad` in rounds of several probes at once, with the serial search's answer.

Why not a k-ary search: splitting the interval at k evenly spaced cuts finds *a* cut where the judgment turns
from good to bad, which is the serial search's cut only when the judgments are monotone along the graph. They
are not always (an error that a later op hides, a mask that saturates both runs alike), and a parallel run that
names another op than ``--workers 1`` would be a tool whose answer depends on the machine. So a round runs the
next cuts the serial binary search *could* visit: the cut it visits now for certain, then the cuts it may visit
after it, most likely first, until the round is full; the serial search then walks through every cut whose
judgment is known. The cuts walked, in order, are exactly the serial search's probes (same indices, same first
bad cut, on any sequence of judgments), and every round advances it at least one step.

How likely a cut is to be visited comes from the judgments already known (the chain pass judges the cuts on piece
boundaries for free): if a cut at or before it failed, or one at or after it passed, the search's next turn is
predicted as a monotone model would take it, and a cut down the other branch is not worth a slot; else both
branches are even. With three slots a round advances two steps of the binary search (as a 4-ary search would);
with two, one step plus the predicted next one (two steps whenever the prediction holds).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from .models import Probe
from .probe import conclude, failing_rule, searching

RunRound = Callable[[list[int], int], list[Probe]]  # (cut indices, round number) -> their probes, in that order


def plan_round(lo: int, hi: int, known: dict[int, bool], slots: int) -> list[int]:
    """Up to ``slots`` cuts the binary search from (``lo``, ``hi``) may visit next, most likely first; cuts with a
    known judgment (``known``: cut -> failing) are walked through without a slot."""

    def p_fail(m: int) -> float:
        bad_before = any(f for j, f in known.items() if j <= m)
        good_after = any(not f for j, f in known.items() if j >= m)
        if bad_before != good_after:
            return 1.0 if bad_before else 0.0
        return 0.5

    picks: list[int] = []
    heap: list[tuple[float, int, int, int]] = [(-1.0, 0, lo, hi)]
    order = 1
    while heap and len(picks) < slots:
        neg, _, a, b = heapq.heappop(heap)
        if b - a <= 1:
            continue
        m = (a + b) // 2
        if m in known:
            heapq.heappush(heap, (neg, order, *((a, m) if known[m] else (m, b))))
            order += 1
            continue
        picks.append(m)
        pf = p_fail(m)
        heapq.heappush(heap, (neg * pf, order, a, m))
        heapq.heappush(heap, (neg * (1.0 - pf), order + 1, m, b))
        order += 2
    return picks


def first_bad_in_rounds(count: int, final: Probe, run_round: RunRound, outputs_ok_db: float | None, slots: int,
                        free: dict[int, Probe] | None = None) -> tuple[int | None, list[Probe], int]:
    """:func:`.probe.first_bad` given the last cut's probe (``final``) and the probes already judged for free
    (``free``), running ``slots`` probes per round. Returns (first bad cut, the serial search's probes in its
    order, rounds run)."""
    path = [final]
    if count <= 0:
        return None, [], 0
    if not searching(final, outputs_ok_db):
        return None, path, 0
    results: dict[int, Probe] = {i: p for i, p in (free or {}).items() if 0 <= i < count}
    results[count - 1] = final
    rounds = 0

    def search(lo: int, hi: int, failing: Callable[[Probe], bool]) -> tuple[int, int]:
        nonlocal rounds
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if mid not in results:
                picks = plan_round(lo, hi, {i: failing(p) for i, p in results.items()}, max(1, slots))
                rounds += 1
                got = run_round(picks, rounds)
                results.update({p.index: p for p in got})
                if mid not in results:
                    raise RuntimeError(f"round {rounds} did not judge cut {mid}")
            p = results[mid]
            path.append(p)
            lo, hi = (lo, mid) if failing(p) else (mid, hi)
        return lo, hi

    lo, hi = search(-1, count - 1, failing_rule(final, outputs_ok_db))
    first = conclude(final, path, lo, hi, search, outputs_ok_db)
    return first, path, rounds
