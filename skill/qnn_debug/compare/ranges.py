"""fp16 range analysis of a reference run: which tensors an fp16 engine cannot hold, and where that starts.

HTP runs every float tensor in fp16 whatever MNN's precision setting (the graph precision is FLOAT16 and the
offline path sets ``fp16_relaxed_precision``). IEEE fp16 stops at 65504; HTP has no inf and saturates at
131008 (:mod:`qnn_debug.htp_fp16`). A reference value beyond those is not representable on the device: the
model is not fp16-safe there, and an fp16 floor run fails the same way, so the floor cannot vouch for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    import numpy as np

    from ..runstore import Run

FP16_MAX = 65504.0  # largest finite IEEE fp16 value (same as qnn_debug.htp_fp16, kept numpy-free here)
HTP_FP16_MAX = 131008.0  # HTP's fp16 saturation value

CHUNK = 1 << 20
MAX_LISTED = 50


class RangeEntry(BaseModel):
    """A reference tensor whose largest magnitude leaves the fp16 range."""

    tensor: str
    op: str | None = None
    op_type: str | None = None
    position: int = -1
    max_abs: float
    beyond_htp: bool  # also beyond HTP's 131008 saturation: the device value is clipped, not just coarse
    harmless: str | None = None  # "at the rail, harmless: ..." when nothing downstream feels the clipped value


class RangeReport(BaseModel):
    """Per-run summary: how many float tensors were checked and the ones that are not fp16-safe."""

    fp16_max: float = FP16_MAX
    htp_max: float = HTP_FP16_MAX
    checked: int = 0
    largest: RangeEntry | None = None  # the reference's largest magnitude overall (safe or not)
    unsafe: list[RangeEntry] = Field(default_factory=list)  # execution order, first MAX_LISTED
    unsafe_count: int = 0  # tensors beyond 65504 whose difference reaches something (the harmless ones excluded)
    harmless_count: int = 0  # tensors beyond 65504 that nothing downstream feels (listed in ``unsafe``, marked)

    @property
    def fp16_safe(self) -> bool:
        return self.unsafe_count == 0

    def sentence(self) -> str:
        """One plain sentence for summaries; empty when every tensor that matters fits."""
        harmful = [e for e in self.unsafe if e.harmless is None]
        if not harmful:
            return ""
        first = harmful[0]
        worst = max(harmful, key=lambda e: e.max_abs)
        head = f"Not fp16-safe: `{first.tensor}` reaches {first.max_abs:.3g}"
        if worst.tensor != first.tensor:
            head += f" (largest: `{worst.tensor}` at {worst.max_abs:.3g})"
        more = f"; {self.unsafe_count} tensor(s) exceed the fp16 maximum {FP16_MAX:g}" if self.unsafe_count > 1 else ""
        return (f"{head}{more}, beyond fp16's {FP16_MAX:g} (HTP saturates at {HTP_FP16_MAX:g}), so no fp16 engine "
                f"can hold it: rescale around a scale-invariant op or keep that region off the NPU.")


def max_abs(values: np.ndarray) -> float:
    """Largest finite magnitude, chunk by chunk (memory-mapped tensors of any size)."""
    import numpy as np

    flat = values.reshape(-1)
    best = 0.0
    for start in range(0, flat.size, CHUNK):
        chunk = np.abs(np.asarray(flat[start:start + CHUNK], dtype=np.float32))
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            best = max(best, float(chunk.max()))
    return best


def reference_maxima(run: Run) -> dict[str, float]:
    """max|x| of every float tensor of ``run`` (inputs included)."""
    out: dict[str, float] = {}
    for rec in run.tensors:
        arr = run.array(rec.name)
        if arr.dtype.kind == "f" and arr.size:
            out[rec.name] = max_abs(arr)
    return out


Judge = Callable[[str, float], "str | None"]  # (tensor, max|x|) -> "at the rail, harmless: ..." or None


def range_report(run: Run, maxima: Mapping[str, float] | None = None, judge: Judge | None = None) -> RangeReport:
    """The fp16 range report of a (reference) run; ``judge`` marks the tensors nothing downstream feels (a mask's
    fill value, a masked Softmax input), which do not make the model unsafe."""
    maxima = dict(maxima) if maxima is not None else reference_maxima(run)
    entries = []
    largest: RangeEntry | None = None
    for rec in sorted(run.tensors, key=lambda r: r.position):
        if rec.name not in maxima:
            continue
        m = maxima[rec.name]
        entry = RangeEntry(tensor=rec.name, op=rec.op, op_type=rec.op_type, position=rec.position,
                           max_abs=float(f"{m:.6g}"), beyond_htp=m > HTP_FP16_MAX)
        if largest is None or m > largest.max_abs:
            largest = entry
        if m > FP16_MAX:
            entry.harmless = judge(rec.name, m) if judge is not None else None
            entries.append(entry)
    harmless = sum(e.harmless is not None for e in entries)
    return RangeReport(checked=len(maxima), largest=largest, unsafe=entries[:MAX_LISTED],
                       unsafe_count=len(entries) - harmless, harmless_count=harmless)


def first_overflows(ops: Iterable[tuple[str, tuple[str, ...], tuple[str, ...]]],
                    maxima: Mapping[str, float], limit: float = FP16_MAX) -> list[tuple[str, str]]:
    """(op, tensor) where the reference *leaves* the range ``limit`` (fp16's 65504, or HTP's 131008): an output
    beyond it whose float inputs are all inside it. ``ops`` are (name, inputs, outputs) in execution order;
    tensors without a maximum (not float, not captured) count as inside."""
    beyond = {name for name, m in maxima.items() if m > limit}
    found: list[tuple[str, str]] = []
    if not beyond:  # the usual case: nothing leaves the range, so no op needs looking at
        return found
    for name, inputs, outputs in ops:
        if not beyond.isdisjoint(inputs):
            continue
        for out in outputs:
            if out in beyond:
                found.append((name, out))
                break
    return found
