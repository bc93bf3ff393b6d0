"""The metrics: each one a small registered function of :class:`~.stats.ErrorStats` (a new metric is one decorated
function here, plus a field in ``ErrorStats`` if it needs a statistic nobody collects yet)."""

from __future__ import annotations

import math
from collections.abc import Callable

from .stats import SQNR_CAP_DB, ErrorStats

_TINY = 1e-6  # MNN's floor for the diff-rate denominator


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


