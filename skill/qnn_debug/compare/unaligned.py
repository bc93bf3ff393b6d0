"""Why tensors were left unaligned, counted by reason, so a report with hundreds of them says why in one line
(a host run of PP-OCRv4 det leaves most of its tensors unpaired: MNN fuses Conv+BN+Relu and dumps its own stages)."""

from __future__ import annotations

import re
from collections import Counter

from .schema import UnalignedRow

_SPECIFICS = re.compile(r"`[^`]*`|'[^']*'|\[[^\]]*\]|\([^)]*\)")


def reason_class(u: UnalignedRow) -> str:
    """The reason without the tensor's own names and shapes: the same class for every tensor left out alike."""
    r = u.reason
    if u.side == "reference":
        if r.startswith("shape mismatch"):
            return "in both runs, but the shapes differ (a layout or reshape the target folded in)"
        if "graph input not recorded" in r:
            return "a graph input the target did not record"
        if "fused away or not dumped" in r:
            return "in the reference only: the target fused it into another op or did not dump it"
    else:
        if r.startswith("not in the reference"):
            return "in the target only: a backend stage or an extra tensor of the target's own"
        if r.startswith("stands for "):
            return "a target stage whose shape does not fit the reference tensor it stands for"
        if "needs the ONNX model" in r:
            return "a pre-activation stage: naming the tensor it stands for needs the ONNX model (--model)"
        if "no " in r and "node of the ONNX model" in r:
            return "a pre-activation stage with no activation node of the ONNX model behind it"
        if "the reference records none of" in r:
            return "a copy of a tensor the reference does not record"
    return " ".join(_SPECIFICS.sub("…", r).split())[:100]


def by_reason(rows: list[UnalignedRow]) -> dict[str, int]:
    """Reason class -> how many tensors, largest first."""
    return dict(Counter(reason_class(u) for u in rows).most_common())


def words(counts: dict[str, int], limit: int = 4) -> str:
    """``"346 not aligned: 300 in the reference only (…), 46 …"`` pieces, the largest first."""
    items = list(counts.items())
    shown = [f"{n} {why}" for why, n in items[:limit]]
    rest = sum(n for _, n in items[limit:])
    return "; ".join(shown + ([f"{rest} for other reasons"] if rest else []))
