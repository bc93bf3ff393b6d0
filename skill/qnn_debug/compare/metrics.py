"""Per-tensor error metrics from one streaming pass (r = reference, t = target).

:class:`ErrorStats` accumulates sufficient statistics chunk by chunk, so a tensor of any size is
compared with a fixed amount of memory; every metric is then a small function of those statistics,
registered with :func:`metric`. A new metric is one new decorated function (plus a field in
``ErrorStats`` if it needs a statistic nobody collects yet).

Definitions (``anchors`` §11): SQNR uses the *reference* as the signal (ORT, torchao, Polygraphy do;
QAIRT uses the target's power); ``diff_rate`` is MNN's gate ``max|t-r| / max|r|``; ModuleBasic divides
by the largest *signed* reference value instead (an all-negative reference then fails on any error),
reported separately as ``diff_rate_signed_max`` so the two can be told apart.

This is the project's only comparator of two arrays (an import-linter contract keeps it free of engine
imports, so every layer may call it; the process supervisor, a leaf, runs the compiler). Speed: each chunk goes through one compiled loop
(``metrics_kernel.c``, built with the machine's C compiler on first use, cached per user and CPU, called
through ctypes without the GIL): every element is read once, fp16 widened from its bits, every statistic
accumulated in float64, nothing allocated. Where no compiler or no writable cache exists (or
``QNN_DEBUG_METRIC_KERNEL=numpy``), the same statistics come from the numpy formulation below: fp16 widened
into the scratch that then holds t - r, float32 BLAS dot products, any NaN/Inf or float32 overflow
switching the chunk to a float64 masked path. Tests hold both to a float64 reference.

Why not numba: its import and cache load cost ~0.45 s of CPU and ~130 MiB per process, more than the
whole numpy comparison of 2 GiB spends in the metrics; a ctypes library loads in a millisecond.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SQNR_CAP_DB = 200.0  # identical tensors: report 200 dB instead of +inf (JSON has no infinity)
_TINY = 1e-6  # MNN's floor for the diff-rate denominator
_F16_MASK = np.int32(-0x70002000)  # 0x8FFFE000: sign bit + the 15 exponent/mantissa bits after << 13
_F16_SCALE = np.float32(2.0**112)  # rebias fp16's exponent (15) to fp32's (127)
_KERNEL_ENV = "QNN_DEBUG_METRIC_KERNEL"  # "numpy" forces the numpy formulation (the compiled loop's fallback)
_KERNEL_SOURCE = Path(__file__).with_name("metrics_kernel.c")
_KERNEL_TYPES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_CC_FLAGS = (("-O3", "-march=native", "-fopenmp-simd"), ("-O3", "-fopenmp-simd"), ("-O3",))


class _KernelStats(ctypes.Structure):
    """Mirror of ``qd_stats`` in metrics_kernel.c."""

    _fields_ = [(name, ctypes.c_int64) for name in ("pairs", "t_nan", "t_inf", "r_nan", "r_inf", "outside")] + [
        (name, ctypes.c_double) for name in ("sd", "sr", "srd", "max_d", "max_r", "min_r")]


_kernel_lock = threading.Lock()
_kernel: dict[str, Any] = {}  # "fns": {(t kind, r kind): C function} or None; "why": how it was loaded, or why not


def compiled_kernel() -> dict[tuple[str, str], Any] | None:
    """The compiled chunk loops, built on first use and cached per machine; None when they cannot be had
    here (no C compiler, nowhere to write, ``QNN_DEBUG_METRIC_KERNEL=numpy``): numpy then does the work."""
    if "fns" not in _kernel:
        with _kernel_lock:
            if "fns" not in _kernel:
                _kernel["fns"], _kernel["why"] = _load_kernel()
    return _kernel["fns"]


def kernel_status() -> str:
    """How chunks are compared in this process ("compiled loop", or "numpy (why)"); setup and the bench print it."""
    return "compiled loop" if compiled_kernel() is not None else f"numpy ({_kernel['why']})"


def _load_kernel() -> tuple[dict[tuple[str, str], Any] | None, str]:
    if os.environ.get(_KERNEL_ENV) == "numpy":
        return None, f"{_KERNEL_ENV}=numpy"
    try:
        source = _KERNEL_SOURCE.read_bytes()
    except OSError as e:
        return None, f"kernel source unreadable: {e.strerror}"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None, "no C compiler found (set CC)"
    ident = hashlib.sha256(source + cc.encode() + _cpu_signature().encode()).hexdigest()[:16]
    why = "no writable cache directory"
    for folder in _cache_dirs():
        lib_path = folder / f"metrics_kernel-{ident}.so"
        try:
            if not lib_path.is_file():
                why = _build(cc, folder, lib_path)
                if why:
                    continue
            lib = ctypes.CDLL(str(lib_path))
            if lib.qd_abi_version() != 1:
                why = "stale kernel library"
                continue
        except OSError as e:
            why = f"kernel library unusable: {e}"
            continue
        fns: dict[tuple[str, str], Any] = {}
        try:
            for tk in _KERNEL_TYPES.values():
                for rk in _KERNEL_TYPES.values():
                    fn = getattr(lib, f"qd_{tk}_{rk}")
                    fn.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_void_p, ctypes.c_ssize_t,
                                   ctypes.c_int64, ctypes.c_double, ctypes.c_double, ctypes.POINTER(_KernelStats)]
                    fn.restype = None
                    fns[(tk, rk)] = fn
        except AttributeError as e:
            why = f"kernel library incomplete: {e}"
            continue
        return fns, f"compiled loop {lib_path.name}"
    return None, why


def _cpu_signature() -> str:
    """Built with -march=native: a cache shared by several machines must not hand one CPU's build to another."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("flags", "model name", "Features", "CPU part"))]
        return platform.machine() + "".join(sorted(set(lines)))
    except OSError:
        return platform.machine() + platform.processor()


def _cache_dirs() -> list[Path]:
    """The user's cache, else a private folder in the temp dir (never a path relative to the cwd)."""
    home = os.path.expanduser("~")
    base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(home, ".cache") if os.path.isabs(home) else "")
    dirs = [Path(base) / "qnn-debug"] if os.path.isabs(base) else []
    return [*dirs, Path(tempfile.gettempdir()) / f"qnn-debug-{_uid()}"]


def _uid() -> int:
    getuid = getattr(os, "getuid", None)
    return int(getuid()) if getuid is not None else 0


def _build(cc: str, folder: Path, lib_path: Path) -> str:
    """Compile into a private name, then rename: concurrent first uses never see half a library."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner = folder.stat().st_uid
    except OSError as e:
        return f"cannot create {folder}: {e.strerror}"
    if owner != _uid():
        return f"{folder} belongs to another user"
    from .. import process  # the one way the project starts a child (the compiler's whole tree is stopped)

    tmp = folder / f".{lib_path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    err = "compiler failed"
    try:
        for flags in _CC_FLAGS:
            try:
                done = process.run([cc, *flags, "-shared", "-fPIC", "-o", str(tmp), str(_KERNEL_SOURCE)],
                                   timeout=120)
            except (OSError, process.ChildTimeout) as e:
                return f"compiler did not run: {e}"
            if done.returncode == 0:
                os.replace(tmp, lib_path)
                return ""
            err = f"compiler failed ({done.status()}): {' '.join(done.tail(3))[-300:]}"
        return err
    finally:
        tmp.unlink(missing_ok=True)


def _kernel_operand(a: np.ndarray) -> tuple[str, np.ndarray, int]:
    """(element kind, array, stride in elements) the compiled loop reads as is: fp16/float32/float64 in
    native byte order with any element-aligned stride; anything else (integers, bool) as float64."""
    a = a.reshape(-1)
    kind = _KERNEL_TYPES.get(a.dtype)
    if kind is None:
        if a.dtype.kind == "f" and not a.dtype.isnative and a.dtype.newbyteorder("=") in _KERNEL_TYPES:
            a = a.astype(a.dtype.newbyteorder("="))
        else:
            a = a.astype(np.float64)
        kind = _KERNEL_TYPES[a.dtype]
    stride, rem = divmod(a.strides[0], a.itemsize)
    if rem:
        a, stride = np.ascontiguousarray(a), 1
    return kind, a, stride


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
