"""Top-1 agreement of the graph outputs: does the target pick the same class/token as the reference?

A healthy fp16 run may sit a few dB below its floor on every output and still be right where it matters: its
argmax along the last axis (the token of an LLM's logits, the class of a classifier) matches the reference's.
A position counts as agreeing when the reference value at the target's argmax is within the target's own noise,
or two fp16 steps, of the reference's maximum (a near-tie that fp16 rounding flips is not a wrong answer).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel

from ..runstore import Run
from .schema import TensorRow

MAX_ELEMENTS = 1 << 24  # outputs larger than this are not re-read for the check
TIE_SIGMAS = 3.0  # a near-tie: the reference gap is within this many RMS errors of the target
TIE_ULPS = 2.0  # ... or within this many fp16 steps of the maximum (a tie fp16 cannot resolve)
NOISY = 0.1  # ... as long as that error is small next to the row's spread (else only an exact match agrees)


class Top1(BaseModel):
    """Positions where the target's argmax picks the reference's top-1 (up to a near-tie), of all positions."""

    agree: int
    positions: int

    @property
    def words(self) -> str:
        return f"{self.agree}/{self.positions}"


def top1_agreement(reference: Run, target: Run, outputs: Iterable[str], rows: dict[str, TensorRow]) -> dict[str, Top1]:
    """Per graph output with a last axis of at least 2 float values, read from both runs as compared."""
    out: dict[str, Top1] = {}
    for name in outputs:
        row = rows.get(name)
        if row is None or row.layout is not None or not reference.has(name) or not target.has(row.name):
            continue
        r = np.asarray(reference.array(name))
        t = np.asarray(target.array(row.name))
        if (r.dtype.kind != "f" or r.shape != t.shape or r.ndim == 0 or r.shape[-1] < 2 or r.size > MAX_ELEMENTS):
            continue
        r2 = r.reshape(-1, r.shape[-1]).astype(np.float64)
        t2 = t.reshape(-1, t.shape[-1]).astype(np.float64)
        if not (np.isfinite(r2).all() and np.isfinite(t2).all()):
            continue
        noise = np.sqrt(np.mean((t2 - r2) ** 2, axis=1))
        noise = np.where(noise <= NOISY * r2.std(axis=1), noise, 0.0)  # a badly-off row earns no tie margin
        top = r2.max(axis=1)
        ulp = np.spacing(np.abs(top).astype(np.float16)).astype(np.float64)  # what fp16 resolves there
        picked = r2[np.arange(len(r2)), np.argmax(t2, axis=1)]
        agree = picked >= top - np.maximum(TIE_SIGMAS * noise, TIE_ULPS * ulp)
        out[name] = Top1(agree=int(np.count_nonzero(agree)), positions=len(r2))
    return out
