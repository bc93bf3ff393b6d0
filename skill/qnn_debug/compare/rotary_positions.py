"""Rotary tables built from multi-row position ids: the layouts VL ports get wrong, as alternatives to score.

Vision-language exports build their rotary cos/sin once from integer ``position_ids`` with several rows: the
Qwen2/3-VL vision encoder from 2 rows (h, w; MNN's ``VisionRotary``: θ over head_dim/2, the h frequencies then
the w frequencies, ``cat(emb, emb)``), the M-RoPE decoder from 3 rows (t, h, w), each rotary frequency taking its
angle from one row. Qwen2-VL gives the rows contiguous chunks of frequencies (``mrope_section`` [t | h | w]);
Qwen3-VL interleaves them (h at j % 3 == 1, w at j % 3 == 2 while j < 3·section, t elsewhere; MNN's
``mrope_reindex``, Hugging Face's ``apply_interleaved_mrope``). A port that swaps two rows or uses the other
section layout builds tables that are all valid rotations, just of the wrong positions: nothing overflows, the
text stays fluent, the image is understood wrongly.

How the alternatives are computed, without knowing the graph's form: a tensor that depends on the graph inputs
only through one integer ``[R, S]`` position input (R = 2 or 3) is recomputed from those ids by its own ancestors
(ONNX Runtime CPU), once with rows swapped, and for R = 3 once per row with every row set to that row: the
frequencies that then agree with the model's own value say which row the model gives each frequency (its
layout and section sizes), and the other layout with the same sections is assembled from the per-row values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

Run = Callable[[np.ndarray], np.ndarray]  # position ids -> the tensor


def position_source(model: onnx.ModelProto, tensor: str) -> tuple[onnx.ModelProto, str] | None:
    """The ancestors of ``tensor`` as a model, and its one graph input, when that is an integer [2|3, S] input."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inputs = {i.name: i for i in model.graph.input}
    inits = {t.name for t in model.graph.initializer}
    seen: set[str] = set()
    keep: list[onnx.NodeProto] = []
    used: list[str] = []
    stack = [tensor]
    while stack:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in inputs:
            used.append(name)
            continue
        node = producer.get(name)
        if node is None:
            continue
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        keep.append(node)
        stack.extend(node.input)
    if len(used) != 1 or tensor not in producer:
        return None
    spec = inputs[used[0]]
    elem = spec.type.tensor_type.elem_type
    dims = spec.type.tensor_type.shape.dim
    if elem not in (onnx.TensorProto.INT32, onnx.TensorProto.INT64) or len(dims) != 2:
        return None
    order = {id(n): i for i, n in enumerate(model.graph.node)}
    keep.sort(key=lambda n: order[id(n)])
    needed = {i for n in keep for i in n.input}
    graph = helper.make_graph(keep, "positions", [spec], [helper.make_empty_tensor_value_info(tensor)],
                              [t for t in model.graph.initializer if t.name in needed and t.name in inits])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return sub, used[0]


def mrope_axes(sections: tuple[int, ...], interleaved: bool) -> np.ndarray:
    """Which row (0 = t, 1 = h, 2 = w) each of ``sum(sections)`` frequencies reads, in either layout."""
    half = sum(sections)
    axis = np.zeros(half, np.int64)
    if interleaved:
        for a in (1, 2):
            axis[a:sections[a] * 3:3] = a
    else:
        axis[sections[0]:sections[0] + sections[1]] = 1
        axis[sections[0] + sections[1]:] = 2
    return axis


def _rows_of(nominal: np.ndarray, per_row: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """For every last-axis index, the row whose values the model's own table holds there, and whether that index
    tells the rows apart at all (low frequencies barely move between nearby positions); None if some index
    matches no row."""
    n = nominal.reshape(-1, nominal.shape[-1]).astype(np.float64)
    err = np.stack([np.abs(n - r.reshape(n.shape)).max(axis=0) for r in per_row])  # [R, L]
    scale = max(float(np.abs(n).max()), 1e-6)
    ordered = np.sort(err, axis=0)
    # a column tells the rows apart when they differ there well above float32 noise (tables rebuilt from fp32
    # cos/sin carry ~1e-6 of it); a told column must match one row far better than the next
    told = ordered[1] > 1e-4 * scale
    if (ordered[0][told] > 0.05 * ordered[1][told]).any():
        return None
    return err.argmin(axis=0), told


def _layout(assign: np.ndarray, told: np.ndarray) -> tuple[bool | None, tuple[int, ...]]:
    """Which layout (True: interleaved) with which sections gives the rows ``assign`` where ``told``."""
    half = len(assign)
    # largest h and w sections first: the lowest frequencies barely move between nearby positions and fit any row,
    # so the data leave them open; the widest sections that fit are the real layouts' (Qwen3-VL [24, 20, 20])
    for s1 in range(half // 2, -1, -1):
        for s2 in range(half - s1, -1, -1):
            sections = (half - s1 - s2, s1, s2)
            for interleaved in (True, False):
                if interleaved and ((s1 and 3 * (s1 - 1) + 1 >= half) or (s2 and 3 * (s2 - 1) + 2 >= half)):
                    continue  # the interleave has no room for that many h or w frequencies
                if (mrope_axes(sections, interleaved)[told] == assign[told]).all():
                    return interleaved, sections
    return None, ()


def _other_layout(assign: np.ndarray, told: np.ndarray) -> tuple[np.ndarray, str] | None:
    """The row each column would read under the other M-RoPE layout (chunked for interleaved and back), over the
    whole rotary width (a table that repeats its first half is read from that half), and its label."""
    length = len(assign)
    h = length // 2
    half = h if length % 2 == 0 and (assign[:h] == assign[h:])[told[:h] & told[h:]].all() else length
    own, sections = _layout(assign[:half], told[:half])
    if own is None:
        return None
    return np.tile(mrope_axes(sections, not own), length // half), _layout_label(sections, own, bool(told[:half].all()))


def alternatives(values: np.ndarray, run: Run, name: str) -> dict[str, np.ndarray]:
    """Each wrong layout's value of the tensor, from the position ids ``values`` [R, S] and ``run`` (ids → tensor)."""
    ids = np.asarray(values)
    rows = ids.shape[0]
    out: dict[str, np.ndarray] = {}
    if rows == 2:
        out[f"{name} rows swapped (the 2-D vision rotary reads w as h and h as w)"] = run(ids[[1, 0]])
        return out
    if rows != 3:
        return out
    out[f"{name} rows h and w swapped (M-RoPE heights read as widths)"] = run(ids[[0, 2, 1]])
    nominal = run(ids)
    per_row = [run(np.repeat(ids[a:a + 1], 3, axis=0)) for a in range(3)]
    found = _rows_of(nominal, per_row)
    if found is None:
        return out
    assign, told = found
    layout = _other_layout(assign, told)
    if layout is None:
        return out
    full, label = layout
    alt = np.empty_like(per_row[0])
    for j, a in enumerate(full):
        alt[..., j] = per_row[a][..., j]
    out[label] = alt
    return out


def table_alternatives(cos: np.ndarray, sin: np.ndarray, ids: np.ndarray,
                       name: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The wrong layouts' cos/sin from the tables' own values when the graph that built them is not at hand (a
    block cut out of the model reads them as inputs): a token whose rows all hold position 1 gives every column's
    angle θ (cos θ, sin θ), so any column at any integer position p is cos(pθ), sin(pθ); the row each column reads
    is the one whose positions reproduce the table, and the alternatives read other rows."""
    ids = np.asarray(ids, np.int64)
    rows, seq = ids.shape
    c = np.asarray(cos, np.float64).reshape(-1, cos.shape[-1])
    s = np.asarray(sin, np.float64).reshape(-1, sin.shape[-1])
    if rows not in (2, 3) or c.shape != s.shape or c.shape[0] != seq:
        return {}
    ones = np.nonzero((ids == 1).all(axis=0))[0]
    if not len(ones):
        return {}
    angle = np.arctan2(s[ones[0]], c[ones[0]])  # [L]

    def table(axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = ids[axis, :].T  # [seq, L]: the position each column reads, per token
        return np.cos(p * angle).reshape(cos.shape), np.sin(p * angle).reshape(sin.shape)

    per_row = [np.cos(ids[a][:, None] * angle[None]) for a in range(rows)]
    found = _rows_of(c, per_row)
    if found is None:
        return {}
    assign, told = found
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if rows == 2:
        out[f"{name} rows swapped (the 2-D vision rotary reads w as h and h as w)"] = table(1 - assign)
        return out
    out[f"{name} rows h and w swapped (M-RoPE heights read as widths)"] = table(np.array([0, 2, 1])[assign])
    layout = _other_layout(assign, told)
    if layout is not None:
        out[layout[1]] = table(layout[0])
    return out


def _layout_label(sections: tuple[int, ...], own_interleaved: bool, exact: bool = True) -> str:
    # the lowest frequencies fit any row at these positions: the sections are then the widest that fit
    sections_text = str(list(sections)) if exact else f"{list(sections)} (as far as these positions tell)"
    if own_interleaved:
        return (f"M-RoPE sections {sections_text} in contiguous chunks t|h|w (Qwen2-VL layout) where the model "
                "interleaves them (Qwen3-VL: h at j%3=1, w at j%3=2)")
    return (f"M-RoPE sections {sections_text} interleaved (Qwen3-VL layout) where the model lays them out in "
            "contiguous chunks t|h|w (Qwen2-VL)")
