"""The compiled chunk loop and its numpy fallback against a plain float64 formulation.

Both paths of ``ErrorStats.add`` must give the statistics a straightforward float64 computation gives, on
every dtype pair the engine meets (fp16/fp32/fp64 and integers), with NaN/Inf on either side, subnormals,
the fp16 extremes, odd lengths, strided and reversed views and empty chunks.
"""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from qnn_debug.compare import metrics
from qnn_debug.compare.metrics import ErrorStats, error_stats, kernel

HAVE_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))


@pytest.fixture(params=["compiled", "numpy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy":
        monkeypatch.setitem(kernel._kernel, "fns", None)
        monkeypatch.setitem(kernel._kernel, "why", "forced by the test")
    elif metrics.compiled_kernel() is None:
        pytest.skip(f"compiled loop unavailable here: {metrics.kernel_status()}")
    return str(request.param)


def reference(t: np.ndarray, r: np.ndarray, atol: float = 1e-2, rtol: float = 1e-2) -> dict[str, float]:
    t64 = np.asarray(t).astype(np.float64).ravel()
    r64 = np.asarray(r).astype(np.float64).ravel()
    keep = np.isfinite(t64) & np.isfinite(r64)
    tf, rf = t64[keep], r64[keep]
    d = tf - rf
    return {
        "n": t64.size, "pairs": int(keep.sum()),
        "t_nan": int(np.isnan(t64).sum()), "t_inf": int(np.isinf(t64).sum()),
        "r_nan": int(np.isnan(r64).sum()), "r_inf": int(np.isinf(r64).sum()),
        "sum_d2": float(np.sum(d * d)), "sum_r2": float(np.sum(rf * rf)), "sum_rd": float(np.sum(rf * d)),
        "abs_d2": float(np.sum(d * d)), "abs_r2": float(np.sum(rf * rf)), "abs_rd": float(np.sum(np.abs(rf * d))),
        "max_abs_d": float(np.abs(d).max()) if d.size else 0.0,
        "max_abs_r": float(np.abs(rf).max()) if d.size else 0.0,
        "max_r": float(rf.max()) if d.size else -np.inf,
        "n_outside": int(np.sum(np.abs(d) > atol + rtol * np.abs(rf))),
    }


def check(stats: ErrorStats, want: dict[str, float], path: str) -> None:
    rel = 1e-12 if path == "compiled" else 1e-5  # the numpy formulation sums in float32
    for key in ("n", "pairs", "t_nan", "t_inf", "r_nan", "r_inf", "n_outside"):
        assert getattr(stats, key) == want[key], key
    for key, scale in (("sum_d2", "abs_d2"), ("sum_r2", "abs_r2"), ("sum_rd", "abs_rd")):
        assert abs(getattr(stats, key) - want[key]) <= rel * want[scale] + 1e-300, key
    for key in ("max_abs_d", "max_abs_r", "max_r"):
        assert getattr(stats, key) == pytest.approx(want[key], rel=1e-7 if path == "numpy" else 0.0), key


def _cast(x: np.ndarray, dtype: str) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        return np.nan_to_num(np.round(x), nan=0, posinf=0, neginf=0).clip(info.min, info.max).astype(dtype)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _pair(rng: np.random.Generator, n: int, t_dtype: str, r_dtype: str, specials: bool) -> tuple[np.ndarray, np.ndarray]:
    r = rng.standard_normal(n) * rng.choice([1e-6, 1.0, 300.0], n)  # fp16 subnormals, ordinary values, outliers
    t = r + rng.standard_normal(n) * 0.02
    if specials and n:
        for arr in (t, r):
            idx = rng.choice(n, size=min(n, 3), replace=False)
            arr[idx] = rng.choice([np.nan, np.inf, -np.inf], idx.size)
        t[rng.integers(n)] = 1e6  # beyond fp16: becomes inf there
    return _cast(t, t_dtype), _cast(r, r_dtype)


DTYPES = [("float16", "float32"), ("float32", "float32"), ("float16", "float16"), ("float32", "float16"),
          ("float64", "float64"), ("float16", "float64"), ("float64", "float32"), ("int8", "float32"),
          ("int32", "int32"), ("float32", "int16")]


@pytest.mark.parametrize(("t_dtype", "r_dtype"), DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 1001, 70_001])
@pytest.mark.parametrize("specials", [False, True])
def test_both_paths_match_float64_reference(path: str, t_dtype: str, r_dtype: str, n: int, specials: bool):
    rng = np.random.default_rng(n * 31 + len(t_dtype + r_dtype) + specials)
    t, r = _pair(rng, n, t_dtype, r_dtype, specials)
    got = ErrorStats()
    got.add(t, r)
    check(got, reference(t, r), path)


@pytest.mark.parametrize("view", ["stride3", "reversed", "transposed", "byteswapped"])
def test_views_are_read_in_place_and_right(path: str, view: str):
    rng = np.random.default_rng(5)
    base_r = (rng.standard_normal((61, 37)) * 4).astype(np.float32)
    base_t = (base_r + rng.standard_normal((61, 37)).astype(np.float32) * 0.03).astype(np.float16)
    if view == "stride3":
        t, r = base_t.ravel()[::3][:700], base_r.ravel()[1::3][:700]
    elif view == "reversed":
        t, r = base_t.ravel()[::-1], base_r.ravel()
    elif view == "transposed":
        t, r = base_t.T, base_r.T
    else:
        t, r = base_t.astype(">f2"), base_r.astype(">f4")
    direct = ErrorStats()
    direct.add(t, r)
    check(direct, reference(t, r), path)
    stats = error_stats(t, r)
    check(stats, reference(t, r), path)


def test_every_fp16_code_is_widened_exactly_and_specials_counted(path: str):
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.isfinite(halves)
    same = ErrorStats()
    same.add(halves, halves.astype(np.float32))
    assert same.pairs == int(finite.sum()) and same.sum_d2 == 0.0 and same.max_abs_d == 0.0
    assert (same.t_nan, same.t_inf, same.r_nan, same.r_inf) == (2046, 2, 2046, 2)
    against_zero = ErrorStats()
    against_zero.add(halves, np.zeros(halves.size, np.float32))
    assert against_zero.max_abs_d == 65504.0
    want = float(np.sum(halves[finite].astype(np.float64) ** 2))
    assert against_zero.sum_d2 == pytest.approx(want, rel=1e-12 if path == "compiled" else 1e-5)


def test_chunked_stream_equals_one_chunk(path: str):
    rng = np.random.default_rng(9)
    r = (rng.standard_normal(10_007) * 2).astype(np.float32)
    t = (r + 0.01 * rng.standard_normal(10_007)).astype(np.float16)
    t[[5, 9000]] = np.nan
    one, many = error_stats(t, r, chunk=1 << 20), error_stats(t, r, chunk=333)
    for key in ("n", "pairs", "t_nan", "n_outside", "max_abs_d", "max_abs_r", "max_r"):
        assert getattr(one, key) == getattr(many, key), key
    for key in ("sum_d2", "sum_r2", "sum_rd"):
        assert getattr(many, key) == pytest.approx(getattr(one, key), rel=1e-6), key


def test_paths_agree_with_each_other(monkeypatch: pytest.MonkeyPatch):
    if metrics.compiled_kernel() is None:
        pytest.skip(f"compiled loop unavailable here: {metrics.kernel_status()}")
    rng = np.random.default_rng(11)
    r = (rng.standard_normal(50_000) * 10).astype(np.float32)
    t = (r * 1.001).astype(np.float16)
    compiled = metrics.metric_values(error_stats(t, r))
    monkeypatch.setitem(kernel._kernel, "fns", None)
    fallback = metrics.metric_values(error_stats(t, r))
    for key, value in compiled.items():
        assert fallback[key] == pytest.approx(value, rel=1e-4, abs=1e-12), key


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler on this machine")
def test_kernel_builds_into_a_fresh_cache_and_falls_back_without_compiler(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fns, why = kernel._load_kernel()
    assert fns is not None, why
    assert list((tmp_path / "cache" / "qnn-debug").glob("metrics_kernel-*.so"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other"))
    monkeypatch.setattr(kernel, "_cache_dirs", lambda: [tmp_path / "other" / "qnn-debug"])
    fns, why = kernel._load_kernel()
    assert fns is None and "compiler did not run" in why
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: cannot compile here' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    fns, why = kernel._load_kernel()
    assert fns is None and "compiler failed (exit status 3): cc: cannot compile here" in why
    assert not list((tmp_path / "other" / "qnn-debug").iterdir())  # nothing half-built left behind
    monkeypatch.setenv(kernel._KERNEL_ENV, "numpy")
    assert kernel._load_kernel() == (None, f"{kernel._KERNEL_ENV}=numpy")


def test_compare_threads_share_the_compiled_loop():
    """Two threads comparing at once (as the compare stage does) get the same numbers as one."""
    rng = np.random.default_rng(3)
    pairs = [((rng.standard_normal(200_000) * 3).astype(np.float32)) for _ in range(4)]
    data = [(r.astype(np.float16), r) for r in pairs]
    alone = [error_stats(t, r) for t, r in data]
    together: list[ErrorStats | None] = [None] * len(data)

    def run(i: int) -> None:
        together[i] = error_stats(*data[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(data))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert together == alone
