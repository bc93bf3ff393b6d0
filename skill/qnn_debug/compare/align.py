"""Pair the tensors of two runs by name and layout; list what cannot be paired instead of dropping it.

A target tensor pairs with the reference tensor of the same name when its shape is the reference
shape, the channel-last permutation of it (QNN/MNN NHWC dumps: ``[N, C, H, W]`` stored as
``[N, H, W, C]``), or a reshape with the same non-unit dimensions (``[1, 16]`` vs ``[1, 16, 1, 1]``).
Everything else becomes an :class:`UnalignedRow` with the reason.

Data are streamed: :func:`iter_chunks` yields matching flat float32 chunks of both tensors, read from
memory-mapped files, so neither run is ever held in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..runstore import Run, TensorRecord
from .metrics import ErrorStats, as_float32
from .schema import UnalignedRow

Layout = Literal["same", "nhwc", "reshape"]
DEFAULT_CHUNK = 1 << 20  # elements per chunk (4 MiB of float32)


@dataclass(frozen=True)
class Pair:
    """A reference tensor and its counterpart in another run, with how to bring it to the reference layout."""

    name: str
    ref: TensorRecord
    other: TensorRecord
    layout: Layout


@dataclass
class Alignment:
    pairs: list[Pair]  # in reference execution order
    unaligned: list[UnalignedRow]


def match_layout(ref_shape: list[int], other_shape: list[int]) -> Layout | None:
    """How ``other`` maps onto ``ref``; ``None`` when it cannot (sizes or dimensions disagree)."""
    if list(other_shape) == list(ref_shape):
        return "same"
    if len(ref_shape) >= 3 and len(other_shape) == len(ref_shape):
        channel_last = [ref_shape[0], *ref_shape[2:], ref_shape[1]]
        if list(other_shape) == channel_last:
            return "nhwc"
    same_size = int(np.prod(ref_shape, dtype=np.int64)) == int(np.prod(other_shape, dtype=np.int64))
    if same_size and [d for d in ref_shape if d != 1] == [d for d in other_shape if d != 1]:
        return "reshape"
    return None


def align(reference: Run, other: Run, *, ignore: Callable[[str], bool] | None = None,
          other_side_label: Literal["target"] = "target") -> Alignment:
    """Pair every reference tensor with ``other``'s tensor of the same name (reference order)."""
    pairs: list[Pair] = []
    unaligned: list[UnalignedRow] = []
    ref_names = set()
    for rec in reference.iter_in_order():
        ref_names.add(rec.name)
        if not other.has(rec.name):
            unaligned.append(UnalignedRow(
                name=rec.name, side="reference", reason=f"not in the {other_side_label} (fused away or not dumped)",
                reference_shape=rec.shape, op=rec.op, position=rec.position,
            ))
            continue
        orec = other.info(rec.name)
        layout = match_layout(rec.shape, orec.shape)
        if layout is None:
            unaligned.append(UnalignedRow(
                name=rec.name, side="reference",
                reason=f"shape mismatch: {other_side_label} {orec.shape} vs reference {rec.shape}",
                reference_shape=rec.shape, target_shape=orec.shape, op=rec.op, position=rec.position,
            ))
            continue
        pairs.append(Pair(rec.name, rec, orec, layout))
    for orec in other.iter_in_order():
        if orec.name in ref_names or (ignore is not None and ignore(orec.name)):
            continue
        what = f" ({orec.label})" if orec.label else ""
        unaligned.append(UnalignedRow(
            name=orec.name, side="target", reason=f"not in the reference{what}: a backend stage or an extra tensor",
            target_shape=orec.shape, op=orec.op, position=orec.position,
        ))
    return Alignment(pairs, unaligned)


def iter_chunks(ref_arr: np.ndarray, other_arr: np.ndarray, layout: Layout,
                chunk: int = DEFAULT_CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Matching flat chunks ``(other, ref)`` in the reference's element order, still in source dtypes."""
    if layout != "nhwc":
        r = ref_arr.reshape(-1)
        o = other_arr.reshape(-1)
        for i in range(0, r.size, chunk):
            yield o[i : i + chunk], r[i : i + chunk]
        return
    # ref [N, C, S1, ...], other [N, S1, ..., C]: walk N and blocks of S1 so chunks stay small.
    n, s1 = ref_arr.shape[0], ref_arr.shape[2]
    per_row = max(1, int(np.prod(ref_arr.shape[1:], dtype=np.int64)) // max(s1, 1))
    rows = max(1, chunk // max(per_row, 1))
    perm = (other_arr.ndim - 2, *range(other_arr.ndim - 2))  # [b, ..., C] -> [C, b, ...]
    for b in range(n):
        for s in range(0, s1, rows):
            o = np.ascontiguousarray(np.transpose(other_arr[b, s : s + rows], perm)).reshape(-1)
            r = np.ascontiguousarray(ref_arr[b, :, s : s + rows]).reshape(-1)
            yield o, r


def pair_stats(reference: Run, other: Run, pair: Pair, *, atol: float, rtol: float,
               chunk: int = DEFAULT_CHUNK) -> ErrorStats:
    """Stream one pair through :class:`ErrorStats` (memory-mapped; bounded memory)."""
    ref_arr = reference.array(pair.ref.name)
    other_arr = other.array(pair.other.name)
    stats = ErrorStats(atol=atol, rtol=rtol)
    scratch = np.empty(min(chunk, max(int(ref_arr.size), 1)), np.float32)
    for o, r in iter_chunks(ref_arr, other_arr, pair.layout, chunk):
        stats.update(as_float32(o, scratch), as_float32(r))
    del ref_arr, other_arr
    return stats


def load_in_reference_layout(run: Run, rec: TensorRecord, ref_shape: list[int]) -> np.ndarray:
    """One tensor of ``run`` in memory, in the reference layout and its stored dtype (single-op checks only)."""
    arr = np.asarray(run.array(rec.name, mmap=False))
    layout = match_layout(ref_shape, list(arr.shape))
    if layout == "nhwc":
        arr = np.moveaxis(arr, -1, 1)
    if layout is not None:
        arr = arr.reshape(ref_shape)
    return np.ascontiguousarray(arr)
