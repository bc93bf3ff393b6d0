"""Pair the tensors of two runs by name and layout; list what cannot be paired instead of dropping it.

A target tensor pairs with the reference tensor of the same name when its shape is the reference
shape, the channel-last permutation of it (QNN/MNN NHWC dumps: ``[N, C, H, W]`` stored as
``[N, H, W, C]``), or a reshape with the same non-unit dimensions (``[1, 16]`` vs ``[1, 16, 1, 1]``).
Everything else becomes an :class:`UnalignedRow` with the reason.

Data are streamed: :func:`pair_stats` reads both tensor files chunk by chunk into reused buffers
(``npy_stream``), or walks memory-mapped arrays block by block for NHWC pairs (:func:`iter_chunks`),
so neither run is ever held in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ..errors import BadInputError
from ..runstore import Run, TensorRecord
from .metrics import ErrorStats, Workspace, as_float32
from .npy_stream import ChunkReader, open_npy, prefetch
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
            why = "graph input not recorded" if rec.kind == "input" else "fused away or not dumped"
            unaligned.append(UnalignedRow(
                name=rec.name, side="reference", reason=f"not in the {other_side_label} ({why})",
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


def tensor_path(run: Run, rec: TensorRecord) -> Path:
    """Where a tensor's bytes are; refuses records that point outside the run (edited run.json)."""
    rel = Path(rec.file)
    if rel.is_absolute() or ".." in rel.parts:
        raise BadInputError(f"run {run.dir} points outside itself ({rec.file})", hint="the run.json was edited or corrupted")
    return run.dir / rel


def prefetch_pair(reference: Run, other: Run, pair: Pair) -> None:
    """Let the kernel read the pair's files while the previous pair is being compared."""
    prefetch(tensor_path(reference, pair.ref))
    prefetch(tensor_path(other, pair.other))


def pair_stats(reference: Run, other: Run, pair: Pair, *, atol: float, rtol: float,
               chunk: int = DEFAULT_CHUNK, ws: Workspace | None = None) -> ErrorStats:
    """Stream one pair through :class:`ErrorStats` with bounded memory.

    Same-order layouts read both files sequentially into the workspace's buffers; the NHWC case walks
    memory-mapped arrays in blocks.
    """
    ws = ws or Workspace()
    stats = ErrorStats(atol=atol, rtol=rtol)
    r_npy = open_npy(tensor_path(reference, pair.ref))
    o_npy = open_npy(tensor_path(other, pair.other))
    if r_npy.size != o_npy.size:
        raise BadInputError(f"tensor {pair.name!r}: the files hold {r_npy.size} and {o_npy.size} elements",
                            hint="a run.json does not match its tensor files; re-run the capture")
    if pair.layout != "nhwc" and not r_npy.fortran and not o_npy.fortran:
        other_chunks = ChunkReader(o_npy, ws.buffers["target"]).chunks(chunk)
        ref_chunks = ChunkReader(r_npy, ws.buffers["reference"]).chunks(chunk)
        for o, r in zip(other_chunks, ref_chunks, strict=True):
            stats.update(as_float32(o, ws, "t32"), as_float32(r, ws, "r32"), ws)
        return stats
    ref_arr = reference.array(pair.ref.name).reshape(pair.ref.shape)
    other_arr = other.array(pair.other.name).reshape(pair.other.shape)
    for o, r in iter_chunks(ref_arr, other_arr, pair.layout, chunk):
        stats.update(as_float32(o, ws, "t32"), as_float32(r, ws, "r32"), ws)
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
