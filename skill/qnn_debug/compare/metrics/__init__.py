"""Per-tensor error metrics from one streaming pass (r = reference, t = target).

:class:`ErrorStats` accumulates sufficient statistics chunk by chunk, so a tensor of any size is
compared with a fixed amount of memory; every metric is then a small function of those statistics,
registered with :func:`metric`. A new metric is one new decorated function (plus a field in
``ErrorStats`` if it needs a statistic nobody collects yet).

Definitions (``anchors`` §11): SQNR uses the *reference* as the signal (ORT, torchao, Polygraphy do;
QAIRT uses the target's power); ``diff_rate`` is MNN's gate ``max|t-r| / max|r|``; ModuleBasic divides
by the largest *signed* reference value instead (an all-negative reference then fails on any error),
reported separately as ``diff_rate_signed_max`` so the two can be told apart.

The package's modules, one job each: :mod:`.kernel` builds and loads the compiled loop, :mod:`.stats` holds
:class:`ErrorStats` and :func:`error_stats`, :mod:`.registry` the metrics; everything public is importable from
here. This is the project's only comparator of two arrays (an import-linter contract keeps it free of engine
imports, so every layer may call it; the process supervisor, a leaf, runs the compiler). Speed: each chunk goes through one compiled loop
(``kernel.c``, built with the machine's C compiler on first use, cached per user and CPU, called
through ctypes without the GIL): every element is read once, fp16 widened from its bits, every statistic
accumulated in float64, nothing allocated. Where no compiler or no writable cache exists (or
``QNN_DEBUG_METRIC_KERNEL=numpy``), the same statistics come from the numpy formulation below: fp16 widened
into the scratch that then holds t - r, float32 BLAS dot products, any NaN/Inf or float32 overflow
switching the chunk to a float64 masked path. Tests hold both to a float64 reference.

Why not numba: its import and cache load cost ~0.45 s of CPU and ~130 MiB per process, more than the
whole numpy comparison of 2 GiB spends in the metrics; a ctypes library loads in a millisecond.
"""

from .kernel import compiled_kernel, kernel_status
from .registry import METRICS, MetricFn, metric, metric_values, sqnr_db
from .stats import SQNR_CAP_DB, ErrorStats, ScratchArrays, as_float32, error_stats, max_rel_error

__all__ = ["METRICS", "SQNR_CAP_DB", "ErrorStats", "MetricFn", "ScratchArrays", "as_float32", "compiled_kernel",
           "error_stats", "kernel_status", "max_rel_error", "metric", "metric_values", "sqnr_db"]
