"""An exact power-of-two rescale around a scale-invariant construct, and where to put it.

A normalisation (L2-norm, RMSNorm, LayerNorm) gives the same result when its input is multiplied by a
constant s, provided the constants added on the way (eps, a bias) are scaled with the power of s the values
they meet carry. Each tensor downstream of the scaled one therefore has a *degree*: it is scaled by s**d
(x*x: 2, Sqrt: half, Div: difference, the normalised result: 0). The region is every op that sees a tensor of
non-zero degree; it must end at degree 0 before anything that is not homogeneous (Softmax, a residual Add of
an unscaled branch, a graph output): a direct consumer of the scaled tensor whose path escapes keeps the
unscaled tensor. With s = 2**-k every multiplication is exact in fp32 (no rounding), so the fixed graph
computes the same outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .intervals import constants

_SAME = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Expand", "Tile", "Split",
         "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "Relu", "Neg", "MaxPool", "AveragePool",
         "GlobalAveragePool", "GlobalMaxPool", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "Dropout"}
_FOLDABLE = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
SQUARING = {"ReduceSumSquare", "Pow"}


class Escape(Exception):
    """A non-zero-degree tensor reaches an op where scaling is not exact."""

    def __init__(self, node: str, culprits: frozenset[str] = frozenset()) -> None:
        super().__init__(node)
        self.node = node
        self.culprits = culprits  # the direct consumers of the source whose scaled values reach it


@dataclass
class Region:
    """Where a rescale of ``source`` is exact: the ops that see it, each tensor's degree, the constants to scale."""

    source: str
    scaled_consumers: set[str]  # direct consumers of ``source`` that take the scaled tensor
    degrees: dict[str, Fraction]  # tensor -> degree (non-zero only; the source itself is 1)
    nodes: list[str]
    const_edits: list[tuple[str, int, Fraction]] = field(default_factory=list)  # (node, input index, degree)
    attr_edits: list[tuple[str, str, Fraction]] = field(default_factory=list)  # (node, attribute, degree)

    def denominator(self) -> int:
        """The exponent must be a multiple of this for every scaled constant to stay a power of two."""
        dens = [d.denominator for d in self.degrees.values()] + [d.denominator for _, _, d in self.const_edits]
        dens += [d.denominator for _, _, d in self.attr_edits]
        return math.lcm(*dens) if dens else 1


def _is_const(name: str, consts: dict[str, np.ndarray]) -> bool:
    return name in consts


def _rule(node: onnx.NodeProto, d: list[Fraction], consts: dict[str, np.ndarray],
          edits: list[tuple[str, int, Fraction]], attrs: list[tuple[str, str, Fraction]]) -> Fraction:
    op, ins, name = node.op_type, list(node.input), node.name
    zero = Fraction(0)

    def rest_zero(start: int = 1) -> None:
        if any(x != 0 for x in d[start:]):
            raise Escape(name)

    def const_edit(i: int, degree: Fraction) -> None:
        if degree != 0:
            if not _is_const(ins[i], consts):
                raise Escape(name)
            edits.append((name, i, degree))

    if op in _SAME:
        rest_zero()
        return d[0]
    if op in ("Add", "Sub", "Max", "Min"):
        if d[0] == d[1]:
            return d[0]
        for i, j in ((0, 1), (1, 0)):
            if d[i] == 0 and _is_const(ins[i], consts):
                const_edit(i, d[j])
                return d[j]
        raise Escape(name)
    if op == "Mul":
        return d[0] + d[1]
    if op == "Div":
        return d[0] - d[1]
    if op == "MatMul":
        return d[0] + d[1]
    if op == "Gemm":
        out = d[0] + d[1]
        if len(ins) > 2 and ins[2]:
            if d[2] != 0:
                raise Escape(name)
            const_edit(2, out)
        return out
    if op in ("Conv", "ConvTranspose"):
        rest_zero()
        if len(ins) > 2 and ins[2]:
            const_edit(2, d[0])
        return d[0]
    if op == "BatchNormalization":
        rest_zero()
        const_edit(1 + 1, d[0])  # B
        const_edit(3, d[0])  # mean
        return d[0]
    if op == "Pow":
        value = consts.get(ins[1])
        if d[1] != 0 or value is None or value.size != 1:
            raise Escape(name)
        p = Fraction(float(value.reshape(-1)[0])).limit_denominator(8)
        if float(p) != float(value.reshape(-1)[0]):
            raise Escape(name)
        return d[0] * p
    if op == "Sqrt":
        return d[0] / 2
    if op == "Reciprocal":
        return -d[0]
    if op == "ReduceSumSquare":
        rest_zero()
        return 2 * d[0]
    if op == "ReduceL2":
        rest_zero()
        return d[0]
    if op == "LpNormalization":
        return zero
    if op == "LayerNormalization" and len([o for o in node.output if o]) == 1:
        rest_zero()
        attrs.append((name, "epsilon", 2 * d[0]))
        return zero
    raise Escape(name)


def find_region(model: onnx.ModelProto, source: str, overflow_tensor: str) -> Region | None:
    """The exact region of a rescale of ``source`` that covers ``overflow_tensor``, or None when there is none."""
    consts = constants(model)
    outputs = {o.name for o in model.graph.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    scaled = {n.name for n in consumers.get(source, [])}
    while scaled:
        try:
            region = _propagate(model, source, scaled, consts, outputs)
        except Escape as e:
            if not e.culprits & scaled:
                return None
            scaled -= e.culprits
            continue
        return region if overflow_tensor in region.degrees and region.degrees[overflow_tensor] > 0 else None
    return None


def _propagate(model: onnx.ModelProto, source: str, scaled: set[str], consts: dict[str, np.ndarray],
               outputs: set[str]) -> Region:
    degrees: dict[str, Fraction] = {source: Fraction(1)}
    taint: dict[str, frozenset[str]] = {}  # tensor -> the direct consumers its scaled values come through
    region = Region(source=source, scaled_consumers=set(scaled), degrees=degrees, nodes=[])
    for node in model.graph.node:
        d = [Fraction(0) if not i else (Fraction(1) if node.name in scaled else Fraction(0)) if i == source
             else degrees.get(i, Fraction(0)) for i in node.input]
        if not any(d):
            continue
        culprits = frozenset().union(*({node.name} if i == source else taint.get(i, frozenset())
                                       for i, x in zip(node.input, d, strict=True) if x != 0))
        region.nodes.append(node.name)
        try:
            out = _rule(node, d, consts, region.const_edits, region.attr_edits)
        except Escape:
            raise Escape(node.name, culprits) from None
        if out != 0:
            for o in node.output:
                if o in outputs:
                    raise Escape(node.name, culprits)
                degrees[o] = out
                taint[o] = culprits
    return region


def foldable(model: onnx.ModelProto, region: Region) -> onnx.NodeProto | None:
    """The op producing the source whose weights (and bias) can carry the scale, if every consumer takes it."""
    consts = constants(model)
    users = [n.name for n in model.graph.node if region.source in n.input]
    if set(users) != region.scaled_consumers or region.source in {o.name for o in model.graph.output}:
        return None
    producer = next((n for n in model.graph.node if region.source in n.output), None)
    if producer is None or producer.op_type not in _FOLDABLE or len(producer.input) < 2:
        return None
    if producer.input[1] not in consts or producer.input[0] in consts:
        return None
    if producer.op_type in ("Gemm", "MatMul") and consts[producer.input[1]].ndim != 2:
        return None
    if producer.op_type == "Gemm" and len(producer.input) > 2 and producer.input[2] and producer.input[2] not in consts:
        return None
    return producer


class _Names:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.used = {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input}
        self.used |= {o for n in model.graph.node for o in n.output} | {n.name for n in model.graph.node}

    def new(self, base: str) -> str:
        cand, n = base, 2
        while cand in self.used:
            cand, n = f"{base}_{n}", n + 1
        self.used.add(cand)
        return cand


def _scaled_const(model: onnx.ModelProto, names: _Names, consts: dict[str, np.ndarray], name: str,
                  exponent: Fraction) -> str:
    """A new initializer holding ``name`` * 2**-exponent (the original stays for its other users)."""
    value = consts[name]
    scaled = (value.astype(np.float64) * 2.0 ** -float(exponent)).astype(value.dtype)
    new = names.new(f"{name}_x2m{str(exponent).replace('/', '_')}")
    model.graph.initializer.append(numpy_helper.from_array(scaled, new))
    return new


def apply(model: onnx.ModelProto, region: Region, k: int) -> tuple[onnx.ModelProto, str, list[str]]:
    """A copy of ``model`` with the source scaled by 2**-k and the region's constants with it.

    Returns the model, how the scale went in and the constants it rescaled."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    consts = constants(fixed)
    names = _Names(fixed)
    nodes = {n.name: n for n in fixed.graph.node}
    changed: list[str] = []
    producer = foldable(fixed, region)
    if producer is not None:
        p = nodes[producer.name]
        for i in range(1, len(p.input)):
            if p.input[i] and (i == 1 or p.op_type != "MatMul"):
                old = p.input[i]
                p.input[i] = _scaled_const(fixed, names, consts, old, Fraction(k))
                changed.append(f"{old} (x 2^-{k})")
        place = f"folded into {p.op_type} {p.name}'s weights" + (" and bias" if len(p.input) > 2 and p.input[2] else "")
    else:
        scale = names.new(f"{region.source}_fp16_scale")
        out = names.new(f"{region.source}_x2m{k}")
        fixed.graph.initializer.append(numpy_helper.from_array(np.array(2.0 ** -k, dtype=np.float32), scale))
        mul = helper.make_node("Mul", [region.source, scale], [out], name=names.new(f"{region.source}_fp16_rescale"))
        first = min(i for i, n in enumerate(fixed.graph.node) if n.name in region.scaled_consumers)
        fixed.graph.node.insert(first, mul)
        for n in fixed.graph.node:
            if n.name in region.scaled_consumers:
                for i, name in enumerate(n.input):
                    if name == region.source:
                        n.input[i] = out
        place = f"a new Mul by 2^-{k} on {region.source} (it also feeds ops outside the normalisation)" if len(
            [n for n in fixed.graph.node if region.source in n.input]) > 1 else f"a new Mul by 2^-{k} on {region.source}"
    for node_name, idx, degree in region.const_edits:
        n = nodes[node_name]
        old = n.input[idx]
        n.input[idx] = _scaled_const(fixed, names, consts, old, degree * k)
        changed.append(f"{old} of {node_name} (x 2^-{degree * k})")
    for node_name, attr, degree in region.attr_edits:
        n = nodes[node_name]
        for a in n.attribute:
            if a.name == attr:
                a.f = float(np.float32(a.f * 2.0 ** -float(degree * k)))
                break
        else:
            n.attribute.append(helper.make_attribute(attr, float(1e-5 * 2.0 ** -float(degree * k))))
        changed.append(f"{attr} of {node_name} (x 2^-{degree * k})")
    _drop_unread_initializers(fixed)
    return fixed, place, changed


def _drop_unread_initializers(model: onnx.ModelProto) -> None:
    """The originals of the rescaled constants are read by nothing once replaced: drop them (and any other
    initializer no node reads), so the fixed model carries no dead weights. Graphs with subgraphs are left as
    they are (a subgraph may read an outer name)."""
    graph = model.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node for a in n.attribute):
        return
    read = {name for n in graph.node for name in n.input} | {o.name for o in graph.output} | {i.name for i in graph.input}
    keep = [t for t in graph.initializer if t.name in read]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


def rewrite_reduce_sum_square(model: onnx.ModelProto) -> list[str]:
    """ReduceSumSquare(x) → ReduceSum(Mul(x, x)) in place (the HTP simulator refuses ReduceSumSquare)."""
    opset = next((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), 13)
    names = _Names(model)
    done: list[str] = []
    new_nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if node.op_type != "ReduceSumSquare":
            new_nodes.append(node)
            continue
        sq = names.new(f"{node.output[0]}_sq")
        new_nodes.append(helper.make_node("Mul", [node.input[0], node.input[0]], [sq], name=names.new(f"{node.name}_square")))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axes_in = list(node.input[1:2])
        if opset >= 13 and "axes" in attrs:  # ReduceSum takes axes as an input from opset 13
            axes_name = names.new(f"{node.name}_axes")
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(attrs.pop("axes"), dtype=np.int64), axes_name))
            axes_in = [axes_name]
        elif opset < 13 and axes_in and axes_in[0]:
            axes_value = constants(model)[axes_in[0]]
            attrs["axes"] = [int(a) for a in axes_value.reshape(-1)]
            axes_in = []
        new_nodes.append(helper.make_node("ReduceSum", [sq, *axes_in], list(node.output), name=node.name, **attrs))
        done.append(node.name)
    if done:
        del model.graph.node[:]
        model.graph.node.extend(new_nodes)
    return done


def is_float(model: onnx.ModelProto, name: str) -> bool:
    """Whether ``name`` is a float tensor where the graph says so (unknown: assumed float)."""
    for v in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if v.name == name:
            return v.type.tensor_type.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16, 0)
    return True
