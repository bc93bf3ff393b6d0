"""Error that drifts away from the floor over a stretch of the graph, without one op jumping.

Localisation looks for jumps (one op much worse than its inputs). Accumulated precision loss has none: each
op adds a little and the excess over the floor grows steadily (measured on the simulator: PP-OCR rec loses
~18 dB over its neck with no single op to blame). Staying silent about it leaves the user with "precision"
and no place; this note gives the stretch (positions, ops) and how many dB it costs.
"""

from __future__ import annotations

from typing import Any

from .schema import TensorRow
from .thresholds import Thresholds

SPREAD = 0.5  # no single op may account for more than this share of a drift (else it is that op's step)


def find_drift(rows: list[TensorRow], th: Thresholds) -> dict[str, Any] | None:
    """The largest rise of the excess over the floor between two tensors with no jump in between."""
    ordered = sorted((r for r in rows if r.excess_db is not None and r.position >= 0 and r.stands_for is None),
                     key=lambda r: r.position)
    best: dict[str, Any] | None = None
    low: TensorRow | None = None
    steepest = 0.0  # the largest single-op jump since ``low``: a drift is spread, no op carries half of it
    for row in ordered:
        excess = float(row.excess_db or 0.0)
        jump = float(row.jump_db or 0.0)
        if jump >= th.jump_db:
            low = None  # a jump: localisation owns it; a drift starts afresh after it
            continue
        if low is None or excess < float(low.excess_db or 0.0):
            low, steepest = row, 0.0
            continue
        steepest = max(steepest, jump)
        rise = excess - float(low.excess_db or 0.0)
        if rise >= th.drift_db and steepest <= SPREAD * rise and (best is None or rise > best["drift_db"]):
            best = {"from": {"tensor": low.name, "op": low.op, "position": low.position,
                             "excess_db": round(float(low.excess_db or 0.0), 1)},
                    "to": {"tensor": row.name, "op": row.op, "position": row.position, "excess_db": round(excess, 1)},
                    "drift_db": round(rise, 1), "positions": [low.position, row.position],
                    "largest_single_jump_db": round(steepest, 1)}
    return best
