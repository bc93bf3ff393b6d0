"""Sufficient statistics of (target, reference) from one streaming pass: :class:`ErrorStats` (the one place two
arrays are compared), its scratch arrays, the exact fp16 widening of the numpy fallback, and :func:`error_stats`."""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from .kernel import _kernel_operand, _KernelStats, compiled_kernel

SQNR_CAP_DB = 200.0  # identical tensors: report 200 dB instead of +inf (JSON has no infinity)
_F16_MASK = np.int32(-0x70002000)  # 0x8FFFE000: sign bit + the 15 exponent/mantissa bits after << 13
_F16_SCALE = np.float32(2.0**112)  # rebias fp16's exponent (15) to fp32's (127)


class ScratchArrays:
    """Scratch arrays reused for every chunk of every tensor, so the hot loop allocates nothing.

    Fresh temporaries cost a page fault per 4 KiB on first touch, which measured slower than the
    arithmetic itself on a 2 GiB comparison.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self.buffers: dict[str, bytearray] = {}

    def get(self, name: str, n: int, dtype: type | np.dtype = np.float32) -> np.ndarray:
        arr = self._arrays.get(name)
        if arr is None or arr.size < n or arr.dtype != dtype:
            arr = np.empty(max(n, 1), dtype)
            self._arrays[name] = arr
        return arr[:n]

    def buffer(self, name: str) -> bytearray:
        """A byte buffer that file reads of this name reuse (grown on demand, never shrunk)."""
        return self.buffers.setdefault(name, bytearray())


def _has_fp16_specials(chunk: np.ndarray) -> bool:
    """Inf/NaN have all exponent bits set: 0x7C00..0x7FFF (positive) or >= 0xFC00 (negative). Two
    read-only reductions find them without writing a mask."""
    bits = chunk.view(np.uint16)
    return bool(chunk.size) and (int(bits.max()) >= 0xFC00 or int(bits.view(np.int16).max()) >= 0x7C00)


def _widen_fp16(chunk: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Exact fp16 → fp32 into ``out`` with integer ops (5x faster than numpy's cast here).

    Sign-extend the 16 bits to int32, shift the exponent+mantissa into fp32 position, keep sign and those
    bits, then multiply by 2**112 to rebias (subnormals come out right). Inf/NaN (exponent 31) would come
    out finite: callers check :func:`_has_fp16_specials` first.
    """
    as_int = out.view(np.int32)
    np.copyto(as_int, chunk.view(np.int16), casting="unsafe")
    np.left_shift(as_int, 13, out=as_int)
    np.bitwise_and(as_int, _F16_MASK, out=as_int)
    np.multiply(out, _F16_SCALE, out=out)
    return out


def as_float32(chunk: np.ndarray, ws: ScratchArrays | None = None, slot: str = "t32") -> np.ndarray:
    """A contiguous float32 view/copy of a 1-D chunk; fp16 is widened exactly with integer ops."""
    if chunk.dtype == np.float32:
        return np.ascontiguousarray(chunk)
    if chunk.dtype != np.float16:
        return np.ascontiguousarray(chunk, dtype=np.float32)
    chunk = np.ascontiguousarray(chunk)
    if _has_fp16_specials(chunk):
        return chunk.astype(np.float32)
    return _widen_fp16(chunk, (ws or ScratchArrays()).get(slot, chunk.size))


@dataclass
class ErrorStats:
    """Sufficient statistics of (t, r) over the finite pairs, plus non-finite counts.

    :meth:`add` is the one place in the project where two arrays are compared: the comparison, the
    baseline's MNN-CPU gate, the ModuleBasic judge, the observer effect and the benchmarks all feed it.
    """

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

    def add(self, t: np.ndarray, r: np.ndarray, ws: ScratchArrays | None = None, *, wide: bool = False) -> None:
        """Add one pair of flat chunks of equal length, stored in any numeric dtype (fp16 fused in).

        One pass per chunk: the compiled loop where it can be had (float64 throughout); otherwise the
        target is widened straight into the scratch that then holds t - r, so no chunk-sized temporary is
        made, and float32 BLAS dot products give the sums. ``wide`` (or any input wider than float32) makes
        that numpy formulation compute in float64 (the gate and the judge: small tensors).
        """
        if t.size != r.size:
            raise ValueError(f"chunk sizes differ: {t.size} vs {r.size}")
        if t.size == 0:
            return
        t, r = t.reshape(-1), r.reshape(-1)
        kernel = compiled_kernel()
        if kernel is not None:
            tk, ta, ts = _kernel_operand(t)
            rk, ra, rs = _kernel_operand(r)
            res = _KernelStats()
            kernel[(tk, rk)](ta.ctypes.data, ts, ra.ctypes.data, rs, t.size, self.atol, self.rtol, ctypes.byref(res))
            self._merge(t.size, res)
            return
        ws = ws or ScratchArrays()
        narrow = (np.float16, np.float32)
        dtype = np.float32 if not wide and t.dtype in narrow and r.dtype in narrow else np.float64
        rr = self._operand(r, ws, "r32", dtype)
        d = ws.get("d64" if dtype is np.float64 else "d", t.size, dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, float32 overflow: caught just below
            if t.dtype == np.float16 and dtype is np.float32 and not _has_fp16_specials(t):
                np.subtract(_widen_fp16(np.ascontiguousarray(t), d), rr, out=d)
            else:
                np.subtract(np.asarray(t, dtype=dtype) if t.dtype != dtype else t, rr, out=d)
            sd, sr, srd = float(np.dot(d, d)), float(np.dot(rr, rr)), float(np.dot(rr, d))
            if not (math.isfinite(sd) and math.isfinite(sr) and math.isfinite(srd)):
                self._update_masked(np.asarray(t, dtype=np.float64), np.asarray(r, dtype=np.float64))
                return
        self.n += t.size
        self.pairs += t.size
        self.sum_d2 += sd
        self.sum_r2 += sr
        self.sum_rd += srd
        rmax, rmin = float(rr.max()), float(rr.min())
        a = np.abs(d, out=d)  # t - r is no longer needed once the sums are taken
        max_d = float(a.max())
        self.max_r = max(self.max_r, rmax)
        self.max_abs_r = max(self.max_abs_r, rmax, -rmin)
        self.max_abs_d = max(self.max_abs_d, max_d)
        if max_d > self.atol:  # otherwise no element can exceed atol + rtol*|r|
            self.n_outside += _count_outside(a, rr, self.atol, self.rtol, ws)

    def _merge(self, size: int, res: _KernelStats) -> None:
        """Fold one chunk's result of the compiled loop into the totals."""
        self.n += size
        self.t_nan += res.t_nan
        self.t_inf += res.t_inf
        self.r_nan += res.r_nan
        self.r_inf += res.r_inf
        if not res.pairs:
            return
        self.pairs += res.pairs
        self.sum_d2 += res.sd
        self.sum_r2 += res.sr
        self.sum_rd += res.srd
        self.max_r = max(self.max_r, res.max_r)
        self.max_abs_r = max(self.max_abs_r, res.max_r, -res.min_r)
        self.max_abs_d = max(self.max_abs_d, res.max_d)
        self.n_outside += res.outside

    @staticmethod
    def _operand(r: np.ndarray, ws: ScratchArrays, slot: str, dtype: type) -> np.ndarray:
        if r.dtype == dtype:
            return np.ascontiguousarray(r)
        if r.dtype == np.float16 and dtype is np.float32:
            return as_float32(r, ws, slot)
        return np.ascontiguousarray(r, dtype=dtype)

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

    @property
    def identical(self) -> bool:
        """Every element pair equal and finite (``numpy.array_equal`` semantics for NaN: not equal)."""
        return self.pairs == self.n and self.sum_d2 == 0.0 and self.max_abs_d == 0.0


def _count_outside(a: np.ndarray, r: np.ndarray, atol: float, rtol: float, ws: ScratchArrays | None) -> int:
    """Elements with |d| > atol + rtol*|r| (``a`` = |d|), checking only those that already exceed atol."""
    mask = np.greater(a, atol, out=ws.get("mask", a.size, np.bool_)) if ws is not None else a > atol
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return 0
    return int(np.count_nonzero(a[idx] > atol + rtol * np.abs(r[idx])))


def error_stats(target: np.ndarray, reference: np.ndarray, *, atol: float = 1e-2, rtol: float = 1e-2,
                chunk: int = 1 << 20, wide: bool = False, ws: ScratchArrays | None = None) -> ErrorStats:
    """Statistics of two in-memory (or memory-mapped) arrays of the same size, in chunks."""
    t = np.asarray(target).reshape(-1)
    r = np.asarray(reference).reshape(-1)
    if t.size != r.size:
        raise ValueError(f"sizes differ: {t.size} vs {r.size}")
    stats = ErrorStats(atol=atol, rtol=rtol)
    ws = ws or ScratchArrays()
    for i in range(0, t.size, chunk):
        stats.add(t[i : i + chunk], r[i : i + chunk], ws, wide=wide)
    return stats


def max_rel_error(stats: ErrorStats) -> tuple[float | None, float | None]:
    """(max|t-r| / max|r|, max|t-r|), the baseline gate's measure; (None, None) when a value is not finite.

    Unlike ``diff_rate`` there is no floor under max|r|: an all-zero reference with any error gives the
    error itself, identical all-zero tensors give 0.
    """
    if stats.n == 0:
        return 0.0, 0.0
    if stats.nonfinite_target or stats.nonfinite_reference:
        return None, None
    diff, scale = stats.max_abs_d, stats.max_abs_r
    return (diff / scale if scale > 0 else (0.0 if diff == 0 else float(diff))), diff
