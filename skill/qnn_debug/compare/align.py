"""Pair the tensors of two runs by name and layout; list what cannot be paired instead of dropping it.

A target tensor pairs with the reference tensor of the same name when its shape is the reference
shape, the channel-last permutation of it (QNN/MNN NHWC dumps: ``[N, C, H, W]`` stored as
``[N, H, W, C]``), or a reshape with the same non-unit dimensions (``[1, 16]`` vs ``[1, 16, 1, 1]``).

A target tensor the reference does not have is an **alias** when its record says which model tensor it
holds the values of (``TensorRecord.equivalent``, written by the MNN dump reader): a backend cast/dequant
copy of a graph input or output, a layout-only copy (ConvertTensor), or an op's result before its fused
activation — the last one stands for the tensor that feeds the activation node in the ONNX model, so it
needs the model's producers. An alias is paired with the reference tensor it stands for, as a row of its
own; several target tensors may stand for one reference tensor (different observations of one value).
A ``fused_output`` tensor is paired with the last model node its fused op covers even when its own name is a
reference tensor's (MNN writes SiLU under the gate MatMul's output name), once the model confirms the cover.
Everything else becomes an :class:`UnalignedRow` with the reason.

Data are streamed: :func:`pair_stats` reads both tensor files chunk by chunk into reused buffers
(``npy_stream``), or walks memory-mapped arrays block by block for NHWC pairs (:func:`iter_chunks`),
so neither run is ever held in memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..errors import BadInputError
from ..runstore import Equivalence, Run, TensorRecord
from .localise import OpNode, ops_behind
from .metrics import ErrorStats, ScratchArrays
from .npy_stream import NpyStream, prefetch
from .schema import UnalignedRow

if TYPE_CHECKING:
    from ..onnx_graph import NodeInfo

Layout = Literal["same", "nhwc", "reshape"]
DEFAULT_CHUNK = 1 << 20  # elements per chunk (4 MiB of float32)
# ONNX nodes a backend fuses into the op before them as its activation (MNN: Conv + ReLU/ReLU6 = Clip)
FUSED_ACTIVATIONS = frozenset({"Relu", "Clip"})
# stage names the run store gives backend copies of a model tensor (``<tensor>@cast``), for runs
# imported before equivalences were recorded
_COPY_STAGE_RE = re.compile(r"^(?P<base>.+)@(?P<stage>cast|dequant)$")


@dataclass(frozen=True)
class Pair:
    """A reference tensor and its counterpart in another run, with how to bring it to the reference layout.

    ``name`` is the row's name: the shared name, or the target's own name when ``other`` is an alias that
    stands for ``ref`` (``alias`` then says why).
    """

    name: str
    ref: TensorRecord
    other: TensorRecord
    layout: Layout
    alias: str | None = None


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
          other_side_label: Literal["target"] = "target",
          producers: Mapping[str, NodeInfo] | None = None) -> Alignment:
    """Pair every reference tensor with ``other``'s tensors: the one of the same name, then its aliases.

    Pairs come in reference order, and the observations of one reference tensor in ``other``'s execution
    order. ``producers`` (ONNX tensor → producing node) lets pre-activation stages find their tensor.
    """
    ref_order = {rec.name: i for i, rec in enumerate(reference.iter_in_order())}
    found: list[tuple[int, int, Pair]] = []
    mismatched: list[UnalignedRow] = []
    leftovers: list[UnalignedRow] = []
    visible = set(other.names())
    for i, orec in enumerate(other.iter_in_order()):
        got: Pair | UnalignedRow | None = _fused_output(reference, orec, producers, visible)
        if got is None and orec.name in ref_order:
            got = _direct(reference.info(orec.name), orec, other_side_label)
        elif got is None and ignore is not None and ignore(orec.name):
            continue
        elif got is None:
            got = _alias(reference, orec, producers)
        if isinstance(got, Pair):
            found.append((ref_order[got.ref.name], i, got))
        else:
            (mismatched if got.side == "reference" else leftovers).append(got)
    pairs = [p for _, _, p in sorted(found, key=lambda x: (x[0], x[1]))]
    seen = {p.ref.name for p in pairs} | {u.name for u in mismatched}
    missing = [_missing(rec, other_side_label) for rec in reference.iter_in_order() if rec.name not in seen]
    by_position = sorted([*missing, *mismatched], key=lambda u: ref_order[u.name])
    return Alignment(pairs, [*by_position, *leftovers])


@dataclass
class Aligned:
    """The align stage's output: the target's pairs (and what could not be paired), and the floor's pairs."""

    pairs: list[Pair]  # in reference execution order
    unaligned: list[UnalignedRow]
    floor_pairs: dict[str, Pair]  # reference tensor -> its pair in the fp16 floor run


def align_runs(reference: Run, target: Run, floor: Run | None = None, *,
               producers: Mapping[str, NodeInfo] | None = None) -> Aligned:
    """Pair the target (and the floor) with the reference; refuse runs that share no tensor or ran on other
    inputs (unless the inputs themselves are in the target, where the metrics stage judges them)."""
    from ..onnx_graph import is_floor_helper

    alignment = align(reference, target, producers=producers)
    if not alignment.pairs:
        raise BadInputError(
            f"none of the {len(reference.tensors)} reference tensors is in the target ({len(target.tensors)} tensors)",
            hint="is the target a run of the same model? Tensors are matched by their model names",
            details={"reference_names": reference.names()[:10], "target_names": target.names()[:10]},
        )
    floor_pairs: dict[str, Pair] = {}
    if floor is not None:
        floor_pairs = {p.name: p for p in align(reference, floor, ignore=is_floor_helper).pairs}
    _check_input_hashes(reference, target, alignment.pairs)
    return Aligned(alignment.pairs, alignment.unaligned, floor_pairs)


def _check_input_hashes(ref: Run, target: Run, pairs: list[Pair]) -> None:
    """Runs on different inputs cannot be compared; say so unless the inputs themselves are in the target."""
    a, b = ref.record.inputs, target.record.inputs
    if a is None or b is None or not a.sha256 or not b.sha256 or a.sha256 == b.sha256:
        return
    if any(p.ref.kind == "input" and p.alias is None for p in pairs):
        return  # the input tensors are compared directly (see input_checks.check_inputs)
    raise BadInputError(
        f"the target ran on different inputs than the reference (input sha256 {b.sha256[:12]} vs {a.sha256[:12]})",
        hint="re-run the target with the baseline's inputs.npz (--inputs BASELINE_DIR/inputs.npz)",
    )


def _direct(rec: TensorRecord, orec: TensorRecord, side: str) -> Pair | UnalignedRow:
    """The tensor of the same name, if its shape fits."""
    layout = match_layout(rec.shape, orec.shape)
    if layout is None:
        return UnalignedRow(name=rec.name, side="reference",
                            reason=f"shape mismatch: {side} {orec.shape} vs reference {rec.shape}",
                            reference_shape=rec.shape, target_shape=orec.shape, op=rec.op, position=rec.position)
    return Pair(rec.name, rec, orec, layout)


def _missing(rec: TensorRecord, side: str) -> UnalignedRow:
    why = "graph input not recorded" if rec.kind == "input" else "fused away or not dumped"
    return UnalignedRow(name=rec.name, side="reference", reason=f"not in the {side} ({why})",
                        reference_shape=rec.shape, op=rec.op, position=rec.position)


def _alias(reference: Run, orec: TensorRecord, producers: Mapping[str, NodeInfo] | None) -> Pair | UnalignedRow:
    """A target-only tensor as an observation of the reference tensor it stands for, else why it cannot be."""
    name, why = stands_for(orec, reference, producers)
    if name is None:
        return UnalignedRow(name=orec.name, side="target", reason=why, target_shape=orec.shape, op=orec.op,
                            position=orec.position)
    rec = reference.info(name)
    layout = match_layout(rec.shape, orec.shape)
    if layout is None:
        return UnalignedRow(name=orec.name, side="target",
                            reason=f"stands for {name} ({why}) but its shape {orec.shape} does not fit {rec.shape}",
                            reference_shape=rec.shape, target_shape=orec.shape, op=orec.op, position=orec.position)
    return Pair(orec.name, rec, orec, layout, alias=why)


def stands_for(orec: TensorRecord, reference: Run,
               producers: Mapping[str, NodeInfo] | None = None) -> tuple[str | None, str]:
    """(the reference tensor a target-only tensor stands for, or None; why — or why not)."""
    eq = orec.equivalent or _copy_stage(orec)
    if eq is None:
        what = f" ({orec.label})" if orec.label else ""
        return None, f"not in the reference{what}: a backend stage or an extra tensor"
    if eq.kind == "pre_activation":
        return _pre_activation(eq, reference, producers)
    name = next((n for n in eq.of if reference.has(n)), None)
    if name is None:
        return None, f"{eq.note}, but the reference records none of {', '.join(eq.of)}"
    return name, eq.note if name == eq.of[0] else f"{eq.note}; {eq.of[0]} holds the values of {name}"


def _pre_activation(eq: Equivalence, reference: Run,
                    producers: Mapping[str, NodeInfo] | None) -> tuple[str | None, str]:
    """The input of the ONNX activation node that produces the op's output."""
    if producers is None:
        return None, f"{eq.note}; finding the tensor it stands for needs the ONNX model (pass --model)"
    for out in eq.of:
        node = producers.get(out)
        if node is not None and node.op_type in FUSED_ACTIVATIONS and node.inputs and reference.has(node.inputs[0]):
            return node.inputs[0], f"{eq.note}; ONNX {node.name} ({node.op_type}) reads {node.inputs[0]}"
    return None, (f"{eq.note}, but no {'/'.join(sorted(FUSED_ACTIVATIONS))} node of the ONNX model makes "
                  f"{' or '.join(eq.of)} from a tensor the reference records")


def _fused_output(reference: Run, orec: TensorRecord, producers: Mapping[str, NodeInfo] | None,
                  visible: set[str]) -> Pair | None:
    """A tensor named after one model tensor but written by a fused op (``fused_output``): paired with the
    output of the last model node it covers, when that node computes the named tensor's producer without any
    tensor the target shows in between; None (pair it by name) when the model says otherwise."""
    eq = orec.equivalent
    if eq is None or eq.kind != "fused_output" or producers is None:
        return None
    own = producers.get(orec.name)
    name = next((n for n in eq.of if reference.has(n) and n in producers), None)
    if own is None or name is None:
        return None
    last = producers[name]
    ops = {t: OpNode(n.position, n.name, n.op_type, n.inputs, n.outputs) for t, n in producers.items()}
    if own.name not in {op.name for op in ops_behind(ops, last.inputs, visible - {orec.name})}:
        return None
    rec = reference.info(name)
    layout = match_layout(rec.shape, orec.shape)
    if layout is None:
        return None
    return Pair(orec.name, rec, orec, layout, alias=f"{eq.note}; it covers ONNX {own.name} ({own.op_type})")


def _copy_stage(orec: TensorRecord) -> Equivalence | None:
    """Runs imported before equivalences were recorded: ``<tensor>@cast`` / ``@dequant`` stage names."""
    m = _COPY_STAGE_RE.match(orec.name)
    if m is None or orec.kind != "stage":
        return None
    return Equivalence(kind="cast", of=[m["base"]], note=f"{m['base']} as the target held it ({m['stage']} stage)")


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


def tensor_file(run: Run, rec: TensorRecord) -> str:
    """Where a tensor's bytes are; refuses records that point outside the run (edited run.json)."""
    return _tensor_file(str(run.dir), rec.file)


@functools.lru_cache(maxsize=1 << 14)
def _tensor_file(run_dir: str, file: str) -> str:
    """Cached: the comparison asks twice per tensor (read-ahead, then read)."""
    rel = Path(file)
    if rel.is_absolute() or ".." in rel.parts:
        raise BadInputError(f"run {run_dir} points outside itself ({file})", hint="the run.json was edited or corrupted")
    return os.path.join(run_dir, file)


def prefetch_pair(reference: Run, other: Run, pair: Pair) -> None:
    """Let the kernel read the pair's files while the previous pair is being compared."""
    prefetch(tensor_file(reference, pair.ref))
    prefetch(tensor_file(other, pair.other))


def pair_stats(reference: Run, other: Run, pair: Pair, *, atol: float, rtol: float,
               chunk: int = DEFAULT_CHUNK, ws: ScratchArrays | None = None) -> ErrorStats:
    """Stream one pair through :class:`ErrorStats` with bounded memory (see :func:`shared_reference_stats`)."""
    return shared_reference_stats(reference, [(other, pair)], atol=atol, rtol=rtol, chunk=chunk, ws=ws)[0]


def shared_reference_stats(reference: Run, others: list[tuple[Run, Pair]], *, atol: float, rtol: float,
                           chunk: int = DEFAULT_CHUNK, ws: ScratchArrays | None = None) -> list[ErrorStats]:
    """Stream pairs that share one reference tensor (a target and the fp16 floor) through one
    :class:`ErrorStats` each, reading the reference file once.

    Same-order layouts read every file sequentially into the workspace's buffers; a pair in NHWC order
    (or a Fortran-ordered file) walks memory-mapped arrays in blocks instead.
    """
    ws = ws or ScratchArrays()
    stats = [ErrorStats(atol=atol, rtol=rtol) for _ in others]
    ref_rec = others[0][1].ref
    streamable = [i for i, (_, pair) in enumerate(others) if pair.layout != "nhwc" and pair.ref.file == ref_rec.file]
    done = _stream_shared(reference, ref_rec, [others[i] for i in streamable], [stats[i] for i in streamable],
                          chunk, ws) if streamable else False
    for i, (run, pair) in enumerate(others):
        if done and i in streamable:
            continue
        ref_arr = reference.array(pair.ref.name).reshape(pair.ref.shape)
        other_arr = run.array(pair.other.name).reshape(pair.other.shape)
        for o, r in iter_chunks(ref_arr, other_arr, pair.layout, chunk):
            stats[i].add(o, r, ws)
        del ref_arr, other_arr
    return stats


def _stream_shared(reference: Run, ref_rec: TensorRecord, others: list[tuple[Run, Pair]], stats: list[ErrorStats],
                   chunk: int, ws: ScratchArrays) -> bool:
    """Read the reference and every other file chunk by chunk, in step; False (nothing added) when a file
    is Fortran-ordered and must be walked through memory maps instead."""
    with contextlib.ExitStack() as stack:
        ref_s = stack.enter_context(NpyStream(tensor_file(reference, ref_rec), ws.buffer("reference")))
        streams: list[NpyStream] = []
        for run, pair in others:
            o_s = stack.enter_context(NpyStream(tensor_file(run, pair.other), ws.buffer(f"other{len(streams)}")))
            if ref_s.npy.size != o_s.npy.size:
                raise BadInputError(f"tensor {pair.name!r}: the files hold {ref_s.npy.size} and {o_s.npy.size} elements",
                                    hint="a run.json does not match its tensor files; re-run the capture")
            streams.append(o_s)
        if ref_s.npy.fortran or any(o.npy.fortran for o in streams):
            return False
        for r, *outs in zip(ref_s.chunks(chunk), *(o.chunks(chunk) for o in streams), strict=True):
            for st, o in zip(stats, outs, strict=True):
                st.add(o, r, ws)
    return True


def load_in_reference_layout(run: Run, rec: TensorRecord, ref_shape: list[int]) -> np.ndarray:
    """One tensor of ``run`` in memory, in the reference layout and its stored dtype (single-op checks only)."""
    arr = np.asarray(run.array(rec.name, mmap=False))
    layout = match_layout(ref_shape, list(arr.shape))
    if layout == "nhwc":
        arr = np.moveaxis(arr, -1, 1)
    if layout is not None:
        arr = arr.reshape(ref_shape)
    return np.ascontiguousarray(arr)
