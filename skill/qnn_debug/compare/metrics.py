"""Per-tensor error metrics from one streaming pass (r = reference, t = target).

:class:`ErrorStats` accumulates sufficient statistics chunk by chunk, so a tensor of any size is
compared with a fixed amount of memory; every metric is then a small function of those statistics,
registered with :func:`metric`. A new metric is one new decorated function (plus a field in
``ErrorStats`` if it needs a statistic nobody collects yet).

Definitions (``anchors`` §11): SQNR uses the *reference* as the signal (ORT, torchao, Polygraphy do;
QAIRT uses the target's power); ``diff_rate`` is MNN's gate ``max|t-r| / max|r|``; ModuleBasic divides
by the largest *signed* reference value instead (an all-negative reference then fails on any error),
reported separately as ``diff_rate_signed_max`` so the two can be told apart.

Speed: the fast path uses float32 BLAS dot products and an exact bit-level fp16→fp32 conversion (5x
faster than numpy's cast here); any NaN/Inf in a chunk switches that chunk to a float64 masked path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SQNR_CAP_DB = 200.0  # identical tensors: report 200 dB instead of +inf (JSON has no infinity)
_TINY = 1e-6  # MNN's floor for the diff-rate denominator
_F16_MASK = np.int32(-0x70002000)  # 0x8FFFE000: sign bit + the 15 exponent/mantissa bits after << 13
_F16_SCALE = np.float32(2.0**112)  # rebias fp16's exponent (15) to fp32's (127)


class Workspace:
    """Scratch arrays reused for every chunk of every tensor, so the hot loop allocates nothing.

    Fresh temporaries cost a page fault per 4 KiB on first touch, which measured slower than the
    arithmetic itself on a 2 GiB comparison.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self.buffers: dict[str, bytearray] = {"target": bytearray(), "reference": bytearray()}

    def get(self, name: str, n: int, dtype: type = np.float32) -> np.ndarray:
        arr = self._arrays.get(name)
        if arr is None or arr.size < n or arr.dtype != dtype:
            arr = np.empty(max(n, 1), dtype)
            self._arrays[name] = arr
        return arr[:n]


def as_float32(chunk: np.ndarray, ws: Workspace | None = None, slot: str = "t32") -> np.ndarray:
    """A contiguous float32 view/copy of a 1-D chunk; fp16 is widened exactly with integer ops.

    The fp16 trick: sign-extend the 16 bits to int32, shift the exponent+mantissa into fp32 position,
    keep sign and those bits, then multiply by 2**112 to rebias (subnormals come out right). Inf/NaN
    (exponent 31) would come out finite, so chunks containing them take numpy's cast.
    """
    if chunk.dtype == np.float32:
        return np.ascontiguousarray(chunk)
    if chunk.dtype != np.float16:
        return np.ascontiguousarray(chunk, dtype=np.float32)
    ws = ws or Workspace()
    n = chunk.size
    bits = np.ascontiguousarray(chunk).view(np.uint16)
    # Inf/NaN have all exponent bits set: 0x7C00..0x7FFF (positive) or >= 0xFC00 (negative). Two
    # read-only reductions find them without writing a mask.
    if n and (int(bits.max()) >= 0xFC00 or int(bits.view(np.int16).max()) >= 0x7C00):
        return chunk.astype(np.float32)
    out = ws.get(slot, n)
    as_int = out.view(np.int32)
    np.copyto(as_int, bits.view(np.int16), casting="unsafe")
    np.left_shift(as_int, 13, out=as_int)
    np.bitwise_and(as_int, _F16_MASK, out=as_int)
    np.multiply(out, _F16_SCALE, out=out)
    return out


@dataclass
class ErrorStats:
    """Sufficient statistics of (t, r) over the finite pairs, plus non-finite counts."""

    atol: float = 1e-2
    rtol: float = 1e-2
    n: int = 0
    pairs: int = 0  # element pairs where both values are finite
    t_nan: int = 0
    t_inf: int = 0
    r_nan: int = 0
    r_inf: int = 0
    sum_d2: float = 0.0
    sum_r2: float = 0.0
    sum_rd: float = 0.0
    max_abs_d: float = 0.0
    max_abs_r: float = 0.0
    max_r: float = -math.inf
    n_outside: int = 0

    def update(self, t: np.ndarray, r: np.ndarray, ws: Workspace | None = None) -> None:
        """Add one pair of flat float32 chunks of equal length."""
        if t.size != r.size:
            raise ValueError(f"chunk sizes differ: {t.size} vs {r.size}")
        if t.size == 0:
            return
        d = np.subtract(t, r, out=ws.get("d", t.size)) if ws is not None else np.subtract(t, r)
        sd, sr, srd = float(np.dot(d, d)), float(np.dot(r, r)), float(np.dot(r, d))
        if not (math.isfinite(sd) and math.isfinite(sr) and math.isfinite(srd)):
            self._update_masked(t, r)
            return
        self.n += t.size
        self.pairs += t.size
        self.sum_d2 += sd
        self.sum_r2 += sr
        self.sum_rd += srd
        rmax, rmin = float(r.max()), float(r.min())
        a = np.abs(d, out=ws.get("abs", d.size)) if ws is not None else np.abs(d)
        max_d = float(a.max())
        self.max_r = max(self.max_r, rmax)
        self.max_abs_r = max(self.max_abs_r, rmax, -rmin)
        self.max_abs_d = max(self.max_abs_d, max_d)
        if max_d > self.atol:  # otherwise no element can exceed atol + rtol*|r|
            self.n_outside += _count_outside(a, r, self.atol, self.rtol, ws)

    def _update_masked(self, t: np.ndarray, r: np.ndarray) -> None:
        """Slow path for chunks with NaN/Inf (or float32 overflow): count them, use float64 on the rest."""
        self.n += t.size
        self.t_nan += int(np.count_nonzero(np.isnan(t)))
        self.t_inf += int(np.count_nonzero(np.isinf(t)))
        self.r_nan += int(np.count_nonzero(np.isnan(r)))
        self.r_inf += int(np.count_nonzero(np.isinf(r)))
        keep = np.isfinite(t) & np.isfinite(r)
        t64, r64 = t[keep].astype(np.float64), r[keep].astype(np.float64)
        if t64.size == 0:
            return
        d = t64 - r64
        self.pairs += t64.size
        self.sum_d2 += float(np.dot(d, d))
        self.sum_r2 += float(np.dot(r64, r64))
        self.sum_rd += float(np.dot(r64, d))
        self.max_r = max(self.max_r, float(r64.max()))
        self.max_abs_r = max(self.max_abs_r, float(np.abs(r64).max()))
        self.max_abs_d = max(self.max_abs_d, float(np.abs(d).max()))
        self.n_outside += int(np.count_nonzero(np.abs(d) > self.atol + self.rtol * np.abs(r64)))

    @property
    def sum_t2(self) -> float:
        return max(self.sum_r2 + 2.0 * self.sum_rd + self.sum_d2, 0.0)

    @property
    def nonfinite_target(self) -> int:
        return self.t_nan + self.t_inf

    @property
    def nonfinite_reference(self) -> int:
        return self.r_nan + self.r_inf


def _count_outside(a: np.ndarray, r: np.ndarray, atol: float, rtol: float, ws: Workspace | None) -> int:
    """Elements with |d| > atol + rtol*|r| (``a`` = |d|), checking only those that already exceed atol."""
    mask = np.greater(a, atol, out=ws.get("mask", a.size, np.bool_)) if ws is not None else a > atol
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return 0
    return int(np.count_nonzero(a[idx] > atol + rtol * np.abs(r[idx])))


MetricFn = Callable[[ErrorStats], float | None]
METRICS: dict[str, MetricFn] = {}


def metric(name: str) -> Callable[[MetricFn], MetricFn]:
    """Register a metric computed from :class:`ErrorStats`; ``None`` means undefined (never NaN/inf)."""

    def register(fn: MetricFn) -> MetricFn:
        METRICS[name] = fn
        return fn

    return register


def sqnr_db(sum_r2: float, sum_d2: float) -> float:
    """10·log10(Σr²/Σd²), capped at ±SQNR_CAP_DB (identical → +cap; zero reference, any error → -cap)."""
    if sum_d2 <= 0.0:
        return SQNR_CAP_DB
    if sum_r2 <= 0.0:
        return -SQNR_CAP_DB
    return max(-SQNR_CAP_DB, min(SQNR_CAP_DB, 10.0 * math.log10(sum_r2 / sum_d2)))


@metric("sqnr_db")
def _sqnr(s: ErrorStats) -> float | None:
    return sqnr_db(s.sum_r2, s.sum_d2) if s.pairs else None


@metric("max_abs")
def _max_abs(s: ErrorStats) -> float | None:
    return s.max_abs_d if s.pairs else None


@metric("diff_rate")
def _diff_rate(s: ErrorStats) -> float | None:
    return s.max_abs_d / max(s.max_abs_r, _TINY) if s.pairs else None


@metric("diff_rate_signed_max")
def _diff_rate_signed(s: ErrorStats) -> float | None:
    # ModuleBasic's running max starts at 0 and ignores |.|: max(0, max r).
    return s.max_abs_d / max(max(s.max_r, 0.0), _TINY) if s.pairs else None


@metric("rel_l2")
def _rel_l2(s: ErrorStats) -> float | None:
    if not s.pairs or s.sum_r2 <= 0.0:
        return 0.0 if s.pairs and s.sum_d2 <= 0.0 else None
    return math.sqrt(s.sum_d2 / s.sum_r2)


@metric("cosine")
def _cosine(s: ErrorStats) -> float | None:
    denom = math.sqrt(s.sum_t2 * s.sum_r2)
    if not s.pairs or denom <= 0.0:
        return None  # undefined at zero norm (QAIRT gives NaN, chipwright 0); say so instead
    return max(-1.0, min(1.0, (s.sum_r2 + s.sum_rd) / denom))


@metric("max_abs_ref")
def _max_abs_ref(s: ErrorStats) -> float | None:
    return s.max_abs_r if s.pairs else None


@metric("outside_tol")
def _outside(s: ErrorStats) -> float | None:
    return s.n_outside / s.pairs if s.pairs else None


@metric("nan")
def _nan(s: ErrorStats) -> float | None:
    return float(s.t_nan)


@metric("inf")
def _inf(s: ErrorStats) -> float | None:
    return float(s.t_inf)


@metric("ref_nonfinite")
def _ref_nonfinite(s: ErrorStats) -> float | None:
    return float(s.nonfinite_reference)


def metric_values(stats: ErrorStats) -> dict[str, float | None]:
    """All registered metrics, rounded for readable JSON (6 significant digits)."""
    out: dict[str, float | None] = {}
    for name, fn in METRICS.items():
        v = fn(stats)
        out[name] = None if v is None or not math.isfinite(v) else float(f"{v:.6g}")
    return out


def error_stats(target: np.ndarray, reference: np.ndarray, *, atol: float = 1e-2, rtol: float = 1e-2,
                chunk: int = 1 << 20) -> ErrorStats:
    """Statistics of two in-memory (or memory-mapped) arrays of the same size, in chunks."""
    t = np.asarray(target).reshape(-1)
    r = np.asarray(reference).reshape(-1)
    if t.size != r.size:
        raise ValueError(f"sizes differ: {t.size} vs {r.size}")
    stats = ErrorStats(atol=atol, rtol=rtol)
    ws = Workspace()
    for i in range(0, t.size, chunk):
        stats.update(as_float32(t[i : i + chunk], ws, "t32"), as_float32(r[i : i + chunk], ws, "r32"), ws)
    return stats
