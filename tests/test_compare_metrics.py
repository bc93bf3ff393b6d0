"""Metrics and alignment against direct float64 formulas (no simulator needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qnn_debug.compare.align import iter_chunks, match_layout
from qnn_debug.compare.metrics import SQNR_CAP_DB, ErrorStats, as_float32, error_stats, metric_values


def test_fp16_widening_is_exact_for_every_bit_pattern():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    halves = bits.view(np.float16)
    finite = np.isfinite(halves)
    ours = as_float32(halves[finite])
    assert np.array_equal(ours.view(np.uint32), halves[finite].astype(np.float32).view(np.uint32))
    # chunks holding inf/NaN take numpy's cast and keep them
    special = as_float32(np.array([np.inf, -np.inf, np.nan, 1.5], np.float16))
    assert np.isinf(special[:2]).all() and np.isnan(special[2]) and special[3] == 1.5


def _direct(t: np.ndarray, r: np.ndarray) -> dict[str, float]:
    t64, r64 = t.astype(np.float64).ravel(), r.astype(np.float64).ravel()
    d = t64 - r64
    return {
        "sqnr_db": 10 * math.log10(np.sum(r64**2) / np.sum(d**2)),
        "max_abs": float(np.abs(d).max()),
        "diff_rate": float(np.abs(d).max() / np.abs(r64).max()),
        "rel_l2": float(np.linalg.norm(d) / np.linalg.norm(r64)),
        "cosine": float(np.dot(t64, r64) / (np.linalg.norm(t64) * np.linalg.norm(r64))),
        "outside_tol": float(np.mean(np.abs(d) > 1e-2 + 1e-2 * np.abs(r64))),
    }


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 20])
def test_streamed_metrics_match_direct_formulas(chunk: int):
    rng = np.random.default_rng(0)
    r = (rng.standard_normal(5000) * 3).astype(np.float32)
    t = (r + rng.standard_normal(5000).astype(np.float32) * 0.05).astype(np.float16)
    got = metric_values(error_stats(t, r, chunk=chunk))
    want = _direct(t, r)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-9), key
    assert got["nan"] == 0 and got["inf"] == 0


def test_nonfinite_values_are_counted_not_averaged():
    r = np.linspace(-1, 1, 100, dtype=np.float32)
    t = r.copy()
    t[[3, 50]] = np.nan
    t[7] = np.inf
    m = metric_values(error_stats(t, r))
    assert m["nan"] == 2 and m["inf"] == 1
    assert m["sqnr_db"] == SQNR_CAP_DB  # the 97 finite pairs are identical
    everything_nan = metric_values(error_stats(np.full(10, np.nan, np.float32), np.ones(10, np.float32)))
    assert everything_nan["nan"] == 10 and everything_nan["sqnr_db"] is None and everything_nan["cosine"] is None


def test_diff_rate_uses_max_abs_and_keeps_modulebasic_variant_apart():
    r = -np.linspace(1, 10, 50, dtype=np.float32)  # all negative: ModuleBasic's signed max is 0
    t = r + 0.01
    m = metric_values(error_stats(t, r))
    assert m["diff_rate"] == pytest.approx(0.01 / 10, rel=1e-3)
    assert m["diff_rate_signed_max"] == pytest.approx(0.01 / 1e-6, rel=1e-3)


def test_degenerate_tensors_give_defined_values():
    zeros = np.zeros(16, np.float32)
    same = metric_values(error_stats(zeros, zeros))
    assert same["sqnr_db"] == SQNR_CAP_DB and same["rel_l2"] == 0.0 and same["cosine"] is None
    off = metric_values(error_stats(zeros + 1, zeros))
    assert off["sqnr_db"] == -SQNR_CAP_DB and off["rel_l2"] is None
    empty = ErrorStats()
    assert metric_values(empty)["sqnr_db"] is None


def test_layout_matching():
    assert match_layout([1, 16, 8, 4], [1, 16, 8, 4]) == "same"
    assert match_layout([1, 16, 8, 4], [1, 8, 4, 16]) == "nhwc"
    assert match_layout([1, 16, 1, 1], [1, 16]) == "reshape"
    assert match_layout([1, 16, 8, 4], [1, 4, 8, 16]) is None
    assert match_layout([2, 3], [3, 2]) is None


@pytest.mark.parametrize("chunk", [5, 64, 10_000])
def test_nhwc_chunks_pair_every_element_with_its_own(chunk: int):
    # Metrics only need both sides in the same order chunk by chunk, each element exactly once.
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    nhwc = np.ascontiguousarray(ref.transpose(0, 2, 3, 1))
    pairs = list(iter_chunks(ref, nhwc, "nhwc", chunk))
    assert len(pairs) > 1 or chunk >= ref.size
    assert all(np.array_equal(o, r) for o, r in pairs)
    assert np.array_equal(np.sort(np.concatenate([r for _, r in pairs])), np.sort(ref.reshape(-1)))


def test_the_gates_and_judges_measures_come_from_the_one_comparator():
    from qnn_debug.baseline import rel_error
    from qnn_debug.compare.metrics import max_rel_error

    rng = np.random.default_rng(2)
    ref = rng.standard_normal(3000).astype(np.float32)
    test = ref + rng.standard_normal(3000).astype(np.float32) * 1e-4
    d = test.astype(np.float64) - ref.astype(np.float64)
    rel, diff = rel_error(test, ref)
    assert diff == float(np.abs(d).max()) and rel == float(np.abs(d).max() / np.abs(ref.astype(np.float64)).max())
    assert rel_error(np.zeros(4), np.zeros(4)) == (0.0, 0.0) and rel_error(np.ones(4), np.zeros(4)) == (1.0, 1.0)
    assert rel_error(np.array([np.nan, 1.0]), np.ones(2)) == (None, None) and rel_error(np.ones(0), np.ones(0)) == (0.0, 0.0)
    wide = error_stats(test, ref, wide=True)
    assert wide.sum_d2 == pytest.approx(float(np.dot(d, d)), rel=1e-12) and max_rel_error(wide) == (rel, diff)
    assert error_stats(ref, ref).identical and not error_stats(test, ref).identical
    assert not error_stats(np.array([np.nan]), np.array([np.nan])).identical


def test_fp16_targets_with_inf_or_nan_take_the_masked_path_in_one_call():
    r = np.linspace(-2, 2, 64, dtype=np.float32)
    t = r.astype(np.float16)
    t[5], t[9] = np.inf, np.nan
    s = error_stats(t, r, chunk=16)
    assert s.t_inf == 1 and s.t_nan == 1 and s.pairs == 62
    clean = error_stats(np.delete(t, [5, 9]), np.delete(r, [5, 9]))
    assert s.sum_d2 == pytest.approx(clean.sum_d2) and s.max_abs_d == pytest.approx(clean.max_abs_d)
