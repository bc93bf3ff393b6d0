"""ModuleBasic's pass rule (``diffmax`` under 1 % of the reference's max, its TESTERROR otherwise) cannot always be met
in fp16: when the fp16 floor itself (the model with every tensor rounded through fp16) misses it on an output, a
TESTERROR on that output is what any fp16 engine gives, not a bug by itself. Said wherever the rule is read (``run``)
or predicted (``compare``'s model outputs)."""

from __future__ import annotations

import numpy as np

RULE = 0.01  # ModuleBasic's relative threshold (mnn.modulebasic.THRESHOLD)


def unreachable_words(output: str, floor_rate: float) -> str:
    return (f"ModuleBasic's pass rule (max error under {RULE:.0%} of the output's max) cannot be met at fp16 on "
            f"{output!r}: the fp16 floor itself misses it (its max error is {floor_rate:.3g} of the max), so a "
            f"TESTERROR there is expected even from a correct fp16 run; judge it against the floor, not by that rule")


def floor_rates(reference: dict[str, np.ndarray], floor: dict[str, np.ndarray]) -> dict[str, float]:
    """Each output's fp16-floor max error over max |reference| (ModuleBasic's rate against max |x|)."""
    from .metrics import error_stats

    out: dict[str, float] = {}
    for name, ref in reference.items():
        got = floor.get(name)
        if got is None or np.asarray(got).size != np.asarray(ref).size:
            continue
        stats = error_stats(np.asarray(got).reshape(-1), np.asarray(ref).reshape(-1), wide=True)
        if stats.pairs and stats.max_abs_r > 0:
            out[name] = float(stats.max_abs_d / stats.max_abs_r)
    return out


def notes(rates: dict[str, float]) -> list[str]:
    return [unreachable_words(name, rate) for name, rate in rates.items() if rate > RULE]
