"""The compiled chunk loop of :class:`~.stats.ErrorStats`: build ``kernel.c`` with the machine's C compiler once,
cache it per user and CPU, load it with ctypes (which releases the GIL).

Where no compiler or no writable cache exists (or ``QNN_DEBUG_METRIC_KERNEL=numpy``) :func:`compiled_kernel` is
None and :mod:`.stats` computes the same statistics with numpy. Imports nothing of the engine but the process
supervisor (a leaf), to run the compiler.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

_KERNEL_ENV = "QNN_DEBUG_METRIC_KERNEL"  # "numpy" forces the numpy formulation (the compiled loop's fallback)
_KERNEL_SOURCE = Path(__file__).with_name("kernel.c")
_KERNEL_TYPES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_CC_FLAGS = (("-O3", "-march=native", "-fopenmp-simd"), ("-O3", "-fopenmp-simd"), ("-O3",))


class _KernelStats(ctypes.Structure):
    """Mirror of ``qd_stats`` in kernel.c."""

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
    from ... import process  # the one way the project starts a child (the compiler's whole tree is stopped)

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


