"""Worst-case value ranges of every float tensor of an ONNX graph, from its inputs' declared ranges.

A sample input shows one image; the fp16 range must hold for every input the model will see (raw pixels
0..255: some image maximises a sum of squares). This is plain interval arithmetic, one [lo, hi] per tensor,
forward through the graph: constants give their exact range, linear ops (Conv, MatMul, Gemm with constant
weights) their per-channel extreme sums, and ops it does not know give no bound (None), which callers report
instead of guessing. Shapes (reduction sizes, MatMul depth) come from a reference run of the same graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

Interval = tuple[float, float]
Bounds = dict[str, Interval | None]

_SAME = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Expand", "Tile", "Split",
         "ReduceMax", "ReduceMin", "ReduceMean", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
         "Dropout", "Cast", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "Gather", "GatherElements",
         "GatherND"}
_MONOTONE: dict[str, Callable[[float], float]] = {
    "Relu": lambda v: max(v, 0.0), "Sigmoid": lambda v: 1.0 / (1.0 + math.exp(-max(min(v, 80.0), -80.0))),
    "Tanh": math.tanh, "Erf": math.erf, "Neg": lambda v: -v,
    "Exp": lambda v: math.exp(min(v, 700.0)), "Sqrt": lambda v: math.sqrt(max(v, 0.0)),
}


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Every constant tensor of the graph: initializers and Constant nodes' values."""
    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    out[node.output[0]] = numpy_helper.to_array(a.t)
                elif a.name in ("value_float", "value_int"):
                    out[node.output[0]] = np.array(a.f if a.name == "value_float" else a.i)
    return out


def _hull(*vals: float) -> Interval:
    return (min(vals), max(vals))


def _mul(a: Interval, b: Interval) -> Interval:
    return _hull(a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])


def _linear(w: np.ndarray, x: Interval, bias: np.ndarray | None, axis: int) -> Interval:
    """Extremes of sum(w * x) + b per output channel (``axis`` of ``w``), x anywhere in ``x`` (and 0: padding)."""
    lo, hi = min(x[0], 0.0), max(x[1], 0.0)
    w2 = np.moveaxis(np.asarray(w, dtype=np.float64), axis, 0).reshape(w.shape[axis], -1)
    pos, neg = np.clip(w2, 0, None).sum(axis=1), np.clip(w2, None, 0).sum(axis=1)
    b = np.zeros(w2.shape[0]) if bias is None else np.asarray(bias, dtype=np.float64).reshape(-1)
    return float((pos * lo + neg * hi + b).min()), float((pos * hi + neg * lo + b).max())


def _count(shapes: Mapping[str, tuple[int, ...]], node: onnx.NodeProto) -> int | None:
    src, dst = shapes.get(node.input[0]), shapes.get(node.output[0])
    if src is None or dst is None:
        return None
    return max(1, int(np.prod(src)) // max(1, int(np.prod(dst))))


def propagate(model: onnx.ModelProto, inputs: Mapping[str, Interval],
              shapes: Mapping[str, tuple[int, ...]]) -> Bounds:
    """[lo, hi] of every tensor (None: not bounded by the ops this knows) given each graph input's range."""
    consts = constants(model)
    bounds: Bounds = {name: (float(np.min(v)), float(np.max(v))) if v.size and v.dtype.kind == "f" else None
                      for name, v in consts.items()}
    for name, rng in inputs.items():
        bounds[name] = (float(rng[0]), float(rng[1]))
    for node in model.graph.node:
        if node.op_type == "Constant":
            continue
        try:
            got = _node(node, bounds, consts, shapes)
        except (ValueError, IndexError, OverflowError, ZeroDivisionError):
            got = None
        if got is not None and not all(math.isfinite(v) for v in got):
            got = None
        for out in node.output:
            bounds[out] = got
    return bounds


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _node(node: onnx.NodeProto, b: Bounds, consts: Mapping[str, np.ndarray],
          shapes: Mapping[str, tuple[int, ...]]) -> Interval | None:
    op, ins = node.op_type, list(node.input)
    x = b.get(ins[0]) if ins and ins[0] else None
    if op in ("Gather", "GatherElements", "GatherND"):  # the gathered values come from the data input
        return x
    if op in _SAME:
        return x
    if op in _MONOTONE:
        if x is None:
            return None
        f = _MONOTONE[op]
        return _hull(f(x[0]), f(x[1]))
    if op == "Softmax":
        return (0.0, 1.0)
    if op == "Concat":
        parts = [b.get(i) for i in ins]
        return None if any(p is None for p in parts) else _hull(*[v for p in parts if p for v in p])
    if op == "Abs":
        return None if x is None else (0.0 if x[0] <= 0 <= x[1] else min(abs(x[0]), abs(x[1])), max(abs(x[0]), abs(x[1])))
    if op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"):
        return _binary(op, ins, b, consts)
    if op == "Reciprocal":
        return None if x is None or x[0] <= 0 <= x[1] else _hull(1 / x[0], 1 / x[1])
    if op == "Clip":
        lo = float(consts[ins[1]]) if len(ins) > 1 and ins[1] in consts else -math.inf
        hi = float(consts[ins[2]]) if len(ins) > 2 and ins[2] in consts else math.inf
        return None if x is None else (min(max(x[0], lo), hi), max(min(x[1], hi), lo))
    if op in ("ReduceSum", "ReduceSumSquare", "ReduceL2"):
        n = _count(shapes, node)
        if x is None or n is None:
            return None
        if op == "ReduceSum":
            return (n * min(x[0], 0.0), n * max(x[1], 0.0))
        sq = max(x[0] ** 2, x[1] ** 2)
        return (0.0, n * sq) if op == "ReduceSumSquare" else (0.0, math.sqrt(n * sq))
    if op in ("Conv", "ConvTranspose") and x is not None and ins[1] in consts:
        bias = consts.get(ins[2]) if len(ins) > 2 and ins[2] else None
        w = consts[ins[1]]
        if op == "ConvTranspose":  # weight (C_in, C_out/g, k...): each output channel sums over axis 0 and the kernel
            return _linear(np.moveaxis(w, 1, 0), x, bias, 0)
        return _linear(w, x, bias, 0)
    if op in ("MatMul", "Gemm"):
        return _matmul(node, ins, b, consts, shapes)
    if op == "BatchNormalization" and x is not None and all(i in consts for i in ins[1:5]):
        s, beta, mean, var = (np.asarray(consts[i], dtype=np.float64) for i in ins[1:5])
        a = s / np.sqrt(var + float(_attr(node, "epsilon", 1e-5)))  # type: ignore[arg-type]
        c = beta - a * mean
        lo, hi = np.minimum(a * x[0], a * x[1]) + c, np.maximum(a * x[0], a * x[1]) + c
        return float(lo.min()), float(hi.max())
    return None


def _binary(op: str, ins: list[str], b: Bounds, consts: Mapping[str, np.ndarray]) -> Interval | None:
    x, y = b.get(ins[0]), b.get(ins[1])
    if op == "Pow":
        if x is None or ins[1] not in consts or consts[ins[1]].size != 1:
            return None
        p = float(consts[ins[1]].reshape(-1)[0])
        if p == 2.0:
            m = max(x[0] ** 2, x[1] ** 2)
            return (0.0 if x[0] <= 0 <= x[1] else min(x[0] ** 2, x[1] ** 2), m)
        if p > 0 and x[0] >= 0:
            return (x[0] ** p, x[1] ** p)
        return None
    if op == "Mul" and ins[0] == ins[1]:
        if x is None:
            return None
        return (0.0 if x[0] <= 0 <= x[1] else min(x[0] ** 2, x[1] ** 2), max(x[0] ** 2, x[1] ** 2))
    if x is None or y is None:
        return None
    if op == "Add":
        return (x[0] + y[0], x[1] + y[1])
    if op == "Sub":
        return (x[0] - y[1], x[1] - y[0])
    if op == "Mul":
        return _mul(x, y)
    if op == "Div":
        return None if y[0] <= 0 <= y[1] else _mul(x, _hull(1 / y[0], 1 / y[1]))
    if op == "Max":
        return (max(x[0], y[0]), max(x[1], y[1]))
    return (min(x[0], y[0]), min(x[1], y[1]))


def _matmul(node: onnx.NodeProto, ins: list[str], b: Bounds, consts: Mapping[str, np.ndarray],
            shapes: Mapping[str, tuple[int, ...]]) -> Interval | None:
    x, y = b.get(ins[0]), b.get(ins[1])
    if x is None:
        return None
    bias = consts.get(ins[2]) if node.op_type == "Gemm" and len(ins) > 2 and ins[2] else None
    if ins[1] in consts and consts[ins[1]].ndim == 2:
        w = consts[ins[1]]
        if node.op_type == "Gemm" and _attr(node, "transB", 0):
            w = w.T
        return _linear(w.T, x, bias, 0)
    shape = shapes.get(ins[0])
    if y is None or not shape:
        return None
    k = shape[-2] if node.op_type == "Gemm" and _attr(node, "transA", 0) else shape[-1]
    lo, hi = _mul(x, y)
    return (k * min(lo, 0.0), k * max(hi, 0.0))


def largest(bound: Interval | None) -> float | None:
    """Largest magnitude inside ``bound`` (None: unbounded)."""
    return None if bound is None else max(abs(bound[0]), abs(bound[1]))
