"""The bisection in rounds (``localise/rounds.py``) against the serial binary search (``probe.first_bad``) on
synthetic judgment sequences: monotone (one step from good to bad), non-monotone (bad cuts scattered, a fault an
op later hides), and the outputs-only rule (``excess_ok_db``, with and without a step). Whatever the sequence, the
rounds walk the serial search's probes and name its cut: the parallel answer never depends on the machine.
"""

from __future__ import annotations

import math
import random

import pytest

from qnn_debug.compare.thresholds import Thresholds
from qnn_debug.localise.models import Probe, ProbeTensor
from qnn_debug.localise.probe import first_bad
from qnn_debug.localise.rounds import first_bad_in_rounds, plan_round

OK_DB = Thresholds().excess_ok_db


def _probe(i: int, bad: bool, excess: float) -> Probe:
    return Probe(index=i, position=i, op=f"op{i}", op_type="Add", frontier=1, bad=bad,
                 worst=ProbeTensor(name=f"t{i}", excess_db=excess, status="bad" if bad else "ok"), bad_tensors=[])


def _sequences(rng: random.Random, n: int) -> list[list[tuple[bool, float]]]:
    step = rng.randrange(n)
    monotone = [(i >= step, 20.0 if i >= step else 0.5) for i in range(n)]
    scattered = [(b, 20.0 if b else 0.5) for b in (rng.random() < 0.3 for _ in range(n))]
    scattered[-1] = (True, 20.0)
    hidden = [(step <= i < step + rng.randrange(1, 4) or i == n - 1, 20.0) for i in range(n)]  # a fault hidden again
    drift = [(False, OK_DB * i / max(1, n - 1) + 0.1) for i in range(n)]  # outputs off, no step: precision
    stepped = [(False, 0.2 if i < step else OK_DB + 2.0) for i in range(n)]  # outputs off, with a step
    late = _crossing_late(n, step)
    drift_then_bug = [(i >= step, 25.0 if i >= step else OK_DB * 1.2 * i / max(1, n - 1)) for i in range(n)]
    return [monotone, scattered, hidden, drift, stepped, late, drift_then_bug]


def _crossing_late(n: int, step: int) -> list[tuple[bool, float]]:
    """A fault that leaves everything after it degraded (14.3 dB) and only the last tensors bad (15.1 dB): the
    1.7B-width x 28-layer decoder with its layer-26 rotary broken."""
    return [(i >= n - 2 and n > 1, 15.1 if i >= n - 2 else 14.3 if i >= step else 2.4) for i in range(n)]


def _search(seq: list[tuple[bool, float]], slots: int, free: set[int]) -> tuple[int | None, list[int], int, int]:
    probes = [_probe(i, b, e) for i, (b, e) in enumerate(seq)]
    ran: list[int] = []

    def run_round(indices: list[int], number: int) -> list[Probe]:
        assert len(indices) <= slots and len(set(indices)) == len(indices) and not set(indices) & set(ran)
        ran.extend(indices)
        return [probes[i] for i in indices]

    first, path, rounds = first_bad_in_rounds(len(seq), probes[-1], run_round, OK_DB, slots,
                                              {i: probes[i] for i in free})
    return first, [p.index for p in path], rounds, len(ran)


def test_rounds_walk_the_serial_search_on_every_kind_of_sequence() -> None:
    rng = random.Random(33)
    cases = 0
    for _ in range(120):
        n = rng.randrange(1, 400)
        for seq in _sequences(rng, n):
            serial_first, serial_path = first_bad(n, lambda i, s=seq: _probe(i, *s[i]), OK_DB)
            for slots in (1, 2, 3, 4, 7):
                free = {i for i in range(n - 1) if rng.random() < 0.05}
                first, path, rounds, ran = _search(seq, slots, free)
                assert first == serial_first and path == [p.index for p in serial_path], (seq, slots, free)
                walked = len([i for i in path[1:] if i not in free])
                assert rounds <= walked  # never more rounds than the serial search's probes
                if slots == 1:
                    assert rounds == walked == ran
                cases += 1
    assert cases == 120 * 7 * 5


@pytest.mark.parametrize("slots", [2, 3, 7])
def test_rounds_take_fewer_steps_on_monotone_sequences(slots: int) -> None:
    """Three slots advance two levels a round (a 4-ary search), seven three; two slots more than one on average
    (the predicted next level) and two levels a round where the free judgments predict the turn."""
    rng = random.Random(slots)
    total_serial = total_rounds = 0
    for _ in range(200):
        n = rng.randrange(64, 600)
        step = rng.randrange(n)
        seq = [(i >= step, 20.0 if i >= step else 0.5) for i in range(n)]
        _, serial_path = first_bad(n, lambda i, s=seq: _probe(i, *s[i]), OK_DB)
        _, _, rounds, _ = _search(seq, slots, set())
        levels = len(serial_path) - 1
        if slots in (3, 7):
            per = int(math.log2(slots + 1))
            assert rounds == math.ceil(levels / per), (n, step)
        total_serial += levels
        total_rounds += rounds
    assert total_rounds < total_serial * (0.7 if slots == 2 else 0.55)


def test_free_judgments_on_piece_boundaries_predict_the_turns() -> None:
    """Eight pieces judged for free: with two slots the levels above one piece take one round each for two."""
    n, step = 512, 451
    seq = [(i >= step, 20.0 if i >= step else 0.5) for i in range(n)]
    boundaries = {64 * k - 1 for k in range(1, 8)}
    _, path, with_free, _ = _search(seq, 2, boundaries)
    _, same_path, without, _ = _search(seq, 2, set())
    assert path == same_path and with_free < without


def test_a_round_starts_with_the_cut_the_serial_search_visits_now() -> None:
    assert plan_round(-1, 99, {}, 1) == [49]
    assert plan_round(-1, 99, {}, 3) == [49, 24, 74]  # both branches even: the next level
    assert plan_round(-1, 99, {80: False}, 2) == [49, 74]  # cut 80 passed: cut 49 passes too (monotone)
    assert plan_round(-1, 99, {49: True}, 2) == [24, 11]  # known cuts are walked through without a slot


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_a_fault_the_outputs_only_just_call_bad_is_named_where_it_steps_up_not_where_it_crosses(slots: int) -> None:
    n, step = 2057, 1940
    seq = _crossing_late(n, step)
    serial_first, serial_path = first_bad(n, lambda i: _probe(i, *seq[i]), OK_DB)
    assert serial_first == step
    first, path, _, _ = _search(seq, slots, set())
    assert first == step and path == [p.index for p in serial_path]
    assert len(path) <= 2 * math.ceil(math.log2(n)) + 1  # the second search starts from the first one's cuts


def test_a_real_bug_after_a_drift_is_still_named_at_its_jump() -> None:
    """The outputs' rule is tried below the bad cut only where it finds a step: an fp16 drift past the rule before
    a real bug has none, and the bug's own cut is named."""
    n, step = 300, 250
    seq = [(i >= step, 25.0 if i >= step else OK_DB * 1.2 * i / (n - 1)) for i in range(n)]
    assert first_bad(n, lambda i: _probe(i, *seq[i]), OK_DB)[0] == step
