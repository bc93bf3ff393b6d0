"""The observer effect of a plain ``.npz`` dump: marking every tensor changes what the target compiles (fusions
are blocked, a decomposed LayerNorm's ``x²`` becomes a tensor of its own), so a per-tensor dump can show an
error the shipped graph does not have. An htp-sim run measures it itself (marked vs unmarked outputs); a dump
brought as an ``.npz`` measures it when the unmarked run's outputs sit beside it, and says how to get them when
they do not (instead of leaving the effect unknown without a word)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

UNMARKED_NAMES = ("{stem}.unmarked.npz", "unmarked_outputs.npz")  # beside the dump; the second is htp-sim's own
NOT_MEASURED = ("not measured: a plain .npz dump has no unmarked run; save the graph outputs of a run with no tensor "
                "marked beside it as {name} (an htp-sim run keeps them in unmarked_outputs.npz) to measure how much "
                "marking changed the outputs")


def unmarked_file(dump: Path) -> Path | None:
    for pattern in UNMARKED_NAMES:
        p = dump.with_name(pattern.format(stem=dump.stem))
        if p.is_file() and p != dump:
            return p
    return None


def observer_effect(dump: Path, marked: Mapping[str, Any], outputs: Sequence[str]) -> tuple[dict[str, float] | None, str]:
    """(SQNR of each marked graph output against the unmarked run's, in dB; or None) and a sentence on where the
    figures come from."""
    import numpy as np

    from ..npz_safe import open_npz
    from .metrics import error_stats, sqnr_db

    found = unmarked_file(dump)
    if found is None:
        return None, NOT_MEASURED.format(name=UNMARKED_NAMES[0].format(stem=dump.stem))
    loaded = open_npz(found)
    effect: dict[str, float] = {}
    for name in outputs:
        if name in marked and name in loaded.files:
            a, b = np.asarray(marked[name], np.float64), np.asarray(loaded[name], np.float64)
            if a.size == b.size:
                stats = error_stats(a.reshape(b.shape), b, wide=True)
                effect[name] = round(float(sqnr_db(stats.sum_r2, stats.sum_d2)), 2)
    if not effect:
        return None, f"not measured: {found.name} holds none of the graph outputs ({', '.join(outputs[:4])})"
    return effect, f"marked vs unmarked graph outputs, from {found.name}"
