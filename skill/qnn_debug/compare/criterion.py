"""The criterion tensors are judged by: which number of the comparator's statistics, and when it is good enough.

One object for the three places that judge: a tensor against the fp16 floor (:func:`.localise.judge_tensor`), an
op re-run on the target's own inputs (:func:`.local_error.local_ok`) and the verdict (:mod:`.verdict`: its
evidence, the unconfirmed-bug and confidence gates, the first failing tensor's excess). The statistics kernel
(:mod:`.metrics`) computes the numbers; this says what they mean. The gates are in :class:`.thresholds.Thresholds`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import MetricValues
from .thresholds import Thresholds


@dataclass(frozen=True)
class Criterion:
    """A metric where higher is better, in dB, judged against the fp16 floor's value of the same metric."""

    metric: str  # a key of the kernel's metric values
    # Below this a tensor or a re-run is broken outright, not imprecise (every bug measured for the thresholds
    # sits far below it; healthy fp16 and 8-bit tensors far above): a huge jump there is a bug even unconfirmed.
    broken_below: float = 20.0

    def value(self, metrics: MetricValues | None) -> float | None:
        return None if metrics is None else metrics.get(self.metric)

    def expected(self, floor_metrics: MetricValues | None, th: Thresholds) -> float:
        """What a correct fp16 run reaches: the floor's own value, capped (HTP arithmetic is never better than
        about fp16)."""
        expected = th.floor_cap_db
        floor = self.value(floor_metrics)
        if floor is not None:
            expected = min(expected, float(floor or 0.0))
        return expected

    def excess(self, value: float, expected: float) -> float:
        """How far ``value`` falls short of ``expected`` (0 when it does not)."""
        return max(0.0, expected - float(value))

    def local_limit(self, expected_local: float | None, th: Thresholds) -> float:
        """The value an fp16 op re-run on its inputs must reach; an op whose own fp16 floor on those inputs is poor
        (``expected_local``) is allowed that much less."""
        if expected_local is None:
            return th.local_ok_db
        return min(th.local_ok_db, expected_local - th.excess_ok_db)

    def local_ok(self, value: float, expected_local: float | None, *, quantized: bool, th: Thresholds) -> bool:
        """The re-run op did its job by this metric: within fp16 precision, or within quantization noise."""
        if quantized:
            return value >= th.quant_local_ok_db
        return value >= self.local_limit(expected_local, th)


SQNR = Criterion("sqnr_db")
