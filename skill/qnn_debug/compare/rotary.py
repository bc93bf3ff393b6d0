"""Rotary embedding (RoPE) layouts: the mistakes real ports make, as alternatives the pattern trials score.

The model's rotary block in torch-export form: ``rotate_half(x) = Concat(Neg(x[..., h:]), x[..., :h])`` (or the
interleaved ``rotate_every_two``: pairs ``x[2i], x[2i+1]`` stacked and reshaped) and
``y = x * cos + rotate_half(x) * sin``. Ports get it wrong in a few recurring ways: pairs taken interleaved
(``x[2i], x[2i+1]``, GPT-J / Meta layout) where the model pairs halves (NeoX / Qwen layout), the sign on the other
half (rotating the other way), the Neg lost, cos and sin swapped, or the head split at another point (a partial
rotary dimension or a section size taken wrongly). Each alternative is computed from the block's own inputs as
the target holds them, so a match says which layout the target used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx


@dataclass
class RotaryBlock:
    """One rotary block of the model: its input, the rotate-half output, and the cos/sin products if present."""

    x: str
    rotated: str  # the rotate-half output (a Concat; a Reshape of stacked pairs in the interleaved form)
    node: str  # the op computing it
    interleaved: bool = False  # the model pairs x[2i], x[2i+1] (GPT-J / Meta form) instead of halves
    cos: str | None = None
    sin: str | None = None
    sin_product: str | None = None  # rotate_half(x) * sin
    cos_product: str | None = None  # x * cos
    output: str | None = None  # x * cos + rotate_half(x) * sin


def _source(node: onnx.NodeProto | None, op_type: str) -> str | None:
    return node.input[0] if node is not None and node.op_type == op_type and node.input else None


def find_block(nodes: list[onnx.NodeProto], tensor: str) -> RotaryBlock | None:
    """The rotary block whose rotate-half output, ``x * cos``, ``rotate_half * sin`` or sum is ``tensor``, if any."""
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    for n in nodes:
        block = _rotate_half(n, producer) or _rotate_pairs(n, producer)
        if block is None:
            continue
        for mul in consumers.get(block.rotated, []):
            if mul.op_type != "Mul" or len(mul.input) != 2:
                continue
            block.sin, block.sin_product = next(i for i in mul.input if i != block.rotated), mul.output[0]
            for add in consumers.get(mul.output[0], []):
                other = producer.get(next((i for i in add.input if i != mul.output[0]), ""))
                if add.op_type == "Add" and other is not None and other.op_type == "Mul" and block.x in other.input:
                    block.cos = next(i for i in other.input if i != block.x) if len(set(other.input)) == 2 else None
                    block.output, block.cos_product = add.output[0], other.output[0]
        if tensor in (block.rotated, block.sin_product, block.cos_product, block.output):
            return block
    return None


def _rotate_half(n: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto]) -> RotaryBlock | None:
    """``Concat(Neg(Slice(x)), Slice(x))``: the halves form (torch ``rotate_half``)."""
    if n.op_type != "Concat" or len(n.input) != 2:
        return None
    x_hi = _source(producer.get(_source(producer.get(n.input[0]), "Neg") or ""), "Slice")
    x_lo = _source(producer.get(n.input[1]), "Slice")
    return RotaryBlock(x=x_hi, rotated=n.output[0], node=n.name) if x_hi is not None and x_hi == x_lo else None


def _rotate_pairs(n: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto]) -> RotaryBlock | None:
    """``Reshape(Concat(Unsqueeze(Neg(x[1::2])), Unsqueeze(x[0::2])))``: the interleaved form (``rotate_every_two``)."""
    if n.op_type != "Reshape" or not n.input:
        return None
    cat = producer.get(n.input[0])
    if cat is None or cat.op_type != "Concat" or len(cat.input) != 2:
        return None
    odd = _source(producer.get(_source(producer.get(_source(producer.get(cat.input[0]), "Unsqueeze") or ""), "Neg")
                               or ""), "Slice")
    even = _source(producer.get(_source(producer.get(cat.input[1]), "Unsqueeze") or ""), "Slice")
    if odd is None or odd != even:
        return None
    return RotaryBlock(x=odd, rotated=n.output[0], node=n.name, interleaved=True)


def pair_variants(x: np.ndarray) -> dict[str, np.ndarray]:
    """rotate-every-two as the wrong layouts compute it (the model's own: ``out[2i] = -x[2i+1], out[2i+1] = x[2i]``)."""
    d = x.shape[-1]
    if d % 2:
        return {}
    h = d // 2
    out: dict[str, np.ndarray] = {
        "pairs taken as halves (x[i], x[i+d/2]) where the model pairs interleaved (x[2i], x[2i+1])":
            np.concatenate([-x[..., h:], x[..., :h]], axis=-1)}
    other, lost = np.empty_like(x), np.empty_like(x)
    other[..., 0::2], other[..., 1::2] = x[..., 1::2], -x[..., 0::2]
    lost[..., 0::2], lost[..., 1::2] = x[..., 1::2], x[..., 0::2]
    out["sign on the other element of each pair (rotated the other way)"] = other
    out["Neg lost (out[2i] = x[2i+1])"] = lost
    return out


def rotate_variants(x: np.ndarray) -> dict[str, np.ndarray]:
    """rotate_half as the wrong layouts compute it (the model's own: ``Concat(-x[h:], x[:h])``)."""
    d = x.shape[-1]
    h, q = d // 2, d // 4
    out: dict[str, np.ndarray] = {}
    if d % 2 == 0:
        inter = np.empty_like(x)
        inter[..., 0::2], inter[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        out["pairs taken interleaved (x[2i], x[2i+1]) where the model pairs halves (x[i], x[i+d/2])"] = inter
        out["sign on the other half (Concat(x[h:], -x[:h]): rotated the other way)"] = np.concatenate(
            [x[..., h:], -x[..., :h]], axis=-1)
        out["Neg lost (Concat(x[h:], x[:h]))"] = np.concatenate([x[..., h:], x[..., :h]], axis=-1)
    if q and d % 4 == 0:
        for at in (q, d - q):
            out[f"head split at {at} instead of {h} (Concat(-x[{at}:], x[:{at}]))"] = np.concatenate(
                [-x[..., at:], x[..., :at]], axis=-1)
    return out


def alternatives(block: RotaryBlock, tensor: str, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each wrong layout's value of ``tensor`` (the block's rotate-half output, its products with cos or sin, or its sum),
    from ``values`` of the block's inputs (x, and cos/sin where the tensor needs them)."""
    x = values[block.x].astype(np.float64)
    rotated = pair_variants(x) if block.interleaved else rotate_variants(x)
    if tensor == block.rotated:
        return rotated
    sin = values.get(block.sin or "")
    if sin is None:
        return {}
    sin = sin.astype(np.float64)
    if tensor == block.sin_product:
        return {k: v * sin for k, v in rotated.items()}
    if tensor == block.cos_product:
        return {"cos and sin swapped (x * sin where the model has x * cos)": x * sin}
    cos = values.get(block.cos or "")
    if tensor != block.output or cos is None:
        return {}
    cos = cos.astype(np.float64)
    out = {k: x * cos + v * sin for k, v in rotated.items()}
    nominal = np.empty_like(x)
    if block.interleaved:
        nominal[..., 0::2], nominal[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    else:
        nominal = np.concatenate([-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]], axis=-1)
    out["cos and sin swapped (x * sin + rotate_half(x) * cos)"] = x * sin + nominal * cos
    return out
