"""Test which wrong behaviour reproduces the target's output, by re-running the op with other semantics.

Each test is a function ``(PatternContext) -> list[Trial]`` registered in :data:`TESTS`; a trial says
what was tried (e.g. "coordinate_transformation_mode=asymmetric") and how closely it reproduces the
target (SQNR of target vs the alternative). A trial *matches* when it reaches the match level and beats
the op's nominal semantics by a margin. Adding a pattern is adding one test function.

Patterns (the ``verdict.pattern`` vocabulary): ``nan_inf``, ``zero_input`` (the op behaved as if its
data input were zeros), ``bias_only`` (the same for an op with a bias: output == bias per channel),
``wrong_coordinates`` (Resize coordinate or rounding mode), ``wrong_semantics`` (another axis, mode, or
a missing bias), ``permutation`` (right values, wrong places: NHWC flatten order, conv weight layout),
``scale_shift`` (target ≈ a·x + b), ``constant``, ``rotary_layout`` (a rotary embedding computed with another
layout: interleaved pairs, the sign on the other half, the Neg lost, cos/sin swapped, another split; see
:mod:`.rotary`; or rotary tables from multi-row position ids with rows swapped or M-RoPE sections chunked where
they are interleaved and back; see :mod:`.rotary_positions`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .local_error import Fetch, LocalRun, LocalRunError
from .metrics import error_stats, metric_values
from .rotary import alternatives, find_block
from .thresholds import Thresholds

# Most specific first: when several trials match, the earlier pattern wins.
PRIORITY = ["nan_inf", "missing_op", "zero_input", "bias_only", "rotary_layout", "wrong_coordinates",
            "fused_activation_dropped", "wrong_semantics", "permutation",
            "scale_shift", "constant"]
BIAS_OPS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}
FLATTENING_OPS = {"Flatten", "Reshape", "Gemm", "MatMul", "Squeeze"}
RESIZE_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@dataclass
class Trial:
    pattern: str
    variant: str
    sqnr_db: float | None
    details: dict[str, Any] = field(default_factory=dict)
    matched: bool = False
    complexity: int = 0  # among matches of one pattern, the simplest explanation wins


@dataclass
class PatternContext:
    run: LocalRun
    tensor: str
    target: np.ndarray  # the target's output, in the re-run's shape
    nominal_sqnr_db: float | None  # target vs the op's own semantics (the local error)
    quantized: bool
    th: Thresholds
    fetch: Fetch | None = None  # other tensors of the model (the target's values where it has them)

    @property
    def local(self) -> np.ndarray:
        return self.run.outputs[self.tensor]

    def score(self, alternative: np.ndarray) -> float | None:
        if alternative.size != self.target.size:
            return None
        return metric_values(error_stats(self.target, alternative.reshape(self.target.shape)))["sqnr_db"]

    def trial(self, pattern: str, variant: str, *, nodes: list[onnx.NodeProto] | None = None,
              feeds: dict[str, np.ndarray] | None = None, initializers: dict[str, np.ndarray] | None = None,
              details: dict[str, Any] | None = None) -> Trial | None:
        """Re-run the segment with one change; None when the change is not runnable for this op.
        ``details["node"]`` names the op the change was made to (a segment can hold several)."""
        try:
            out = self.run.rerun(nodes=nodes, feeds=feeds, initializers=initializers)[self.tensor]
        except LocalRunError:
            return None
        return Trial(pattern, variant, self.score(out), dict(details or {}))


TestFn = Callable[[PatternContext], list[Trial]]
TESTS: list[TestFn] = []


def pattern_test(fn: TestFn) -> TestFn:
    TESTS.append(fn)
    return fn


def _with_attr(node: onnx.NodeProto, **attrs: Any) -> onnx.NodeProto:
    new = copy.deepcopy(node)
    keep = [a for a in new.attribute if a.name not in attrs]
    del new.attribute[:]
    new.attribute.extend(keep)
    for k, v in attrs.items():
        new.attribute.append(helper.make_attribute(k, v))
    return new


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _ops(ctx: PatternContext, *op_types: str) -> list[tuple[int, onnx.NodeProto]]:
    """Ops of these types in the re-run segment (usually just the suspect; more when tensors were not dumped)."""
    return [(i, n) for i, n in enumerate(ctx.run.segment.nodes) if n.op_type in op_types]


def _replace(ctx: PatternContext, index: int, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    nodes = list(ctx.run.segment.nodes)
    nodes[index] = node
    return nodes


def _float_feeds(ctx: PatternContext) -> list[str]:
    return [n for n, v in ctx.run.feeds.items() if v.dtype.kind == "f"]


@pattern_test
def nan_inf(ctx: PatternContext) -> list[Trial]:
    bad = int(np.count_nonzero(~np.isfinite(ctx.target)))
    if bad and np.isfinite(ctx.local).all():
        return [Trial("nan_inf", "non-finite values", None, {"nonfinite": bad, "of": int(ctx.target.size)}, True)]
    return []


@pattern_test
def zero_inputs(ctx: PatternContext) -> list[Trial]:
    """Data inputs replaced by zeros (all at once, then each alone when there are several)."""
    names = _float_feeds(ctx)
    sets = [names] + ([[n] for n in names] if len(names) > 1 else [])
    trials = []
    op = ctx.run.op
    bias_idx = BIAS_OPS.get(op.op_type)
    has_bias = bias_idx is not None and len(op.input) > bias_idx and bool(op.input[bias_idx])
    for zeroed in sets:
        feeds = dict(ctx.run.feeds)
        for n in zeroed:
            feeds[n] = np.zeros_like(feeds[n])
        pattern = "bias_only" if has_bias else "zero_input"
        t = ctx.trial(pattern, f"{', '.join(zeroed)} read as zeros", feeds=feeds, details={"zeroed": zeroed})
        if t is not None:
            trials.append(t)
    return trials


@pattern_test
def rotary_layout(ctx: PatternContext) -> list[Trial]:
    """A rotary block (rotate_half, its product with sin, or its sum) computed with another layout."""
    block = find_block(list(ctx.run.index.nodes.values()), ctx.tensor)
    if block is None:
        return []
    values = {n: v for n in (block.x, block.cos, block.sin) if n is not None and (v := _value(ctx, n)) is not None}
    if block.x not in values:
        return []
    return [Trial("rotary_layout", f"{label}, in the rotary block of {block.node}", ctx.score(alt),
                  {"rotary_block": block.node, "rotary_input": block.x})
            for label, alt in alternatives(block, ctx.tensor, values).items()]


@pattern_test
def rotary_positions(ctx: PatternContext) -> list[Trial]:
    """Rotary tables built from multi-row position ids (2-D vision rotary, M-RoPE) with rows swapped or the sections
    laid out the other way (:mod:`.rotary_positions`): at a tensor of the tables themselves, or at a rotary block
    (``x * cos``, ``rotate_half(x) * sin``, their sum) whose cos and sin are such tables."""
    from .rotary_positions import position_source

    model = ctx.run.index.model
    found = position_source(model, ctx.tensor)
    if found is not None:
        alts = _position_alternatives(ctx, found[0], found[1], ctx.tensor)
        where = f"in the rotary tables computed by {ctx.run.op.name}"
        return [Trial("rotary_layout", f"{label}, {where}", ctx.score(alt), {"rotary_positions": found[1]})
                for label, alt in alts.items()]
    block = find_block(list(ctx.run.index.nodes.values()), ctx.tensor)
    if block is None or block.cos is None or block.sin is None or ctx.tensor == block.rotated:
        return []
    x = _value(ctx, block.x)
    tables = _table_alternatives(ctx, block.cos, block.sin)
    if x is None or not tables:
        return []
    x = np.asarray(x, np.float64)
    h = x.shape[-1] // 2
    if block.interleaved:
        rotated = np.empty_like(x)
        rotated[..., 0::2], rotated[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    else:
        rotated = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    trials = []
    for label, (c, sn) in tables.items():
        value = {block.cos_product: x * c, block.sin_product: rotated * sn, block.output: x * c + rotated * sn}.get(
            ctx.tensor)
        if value is not None:
            trials.append(Trial("rotary_layout", f"{label}, in the cos/sin tables of the rotary block of {block.node}",
                                ctx.score(value), {"rotary_block": block.node}))
    return trials


def _table_alternatives(ctx: PatternContext, cos: str, sin: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The cos/sin of a rotary block under the other position-row layouts: rebuilt by the graph from the ids when
    the tables come from them here, else from the tables' own values and the ids among the graph inputs."""
    from .rotary_positions import position_source, table_alternatives

    model = ctx.run.index.model
    cos_src, sin_src = position_source(model, cos), position_source(model, sin)
    if cos_src is not None and sin_src is not None and cos_src[1] == sin_src[1]:
        c = _position_alternatives(ctx, cos_src[0], cos_src[1], cos)
        s = _position_alternatives(ctx, sin_src[0], sin_src[1], sin)
        return {k: (c[k], s[k]) for k in c.keys() & s.keys()}
    cv, sv = _value(ctx, cos), _value(ctx, sin)
    if cv is None or sv is None:
        return {}
    tokens = int(np.prod(np.asarray(cv).shape[:-1]))
    for spec in model.graph.input:
        dims = [d.dim_value for d in spec.type.tensor_type.shape.dim]
        if spec.type.tensor_type.elem_type in (onnx.TensorProto.INT32, onnx.TensorProto.INT64) and len(dims) == 2 \
                and dims[0] in (2, 3) and dims[1] == tokens and (ids := _value(ctx, spec.name)) is not None:
            return table_alternatives(np.asarray(cv), np.asarray(sv), np.asarray(ids), spec.name)
    return {}


def _position_alternatives(ctx: PatternContext, sub: onnx.ModelProto, ids_name: str, tensor: str) -> dict[str, np.ndarray]:
    from .local_error import run_cpu
    from .rotary_positions import alternatives as position_alternatives

    ids = _value(ctx, ids_name)
    if ids is None or np.asarray(ids).ndim != 2 or np.asarray(ids).shape[0] not in (2, 3):
        return {}

    def run(values: np.ndarray) -> np.ndarray:
        return run_cpu(sub, {ids_name: np.ascontiguousarray(values)}, [tensor])[tensor]

    try:
        return position_alternatives(np.asarray(ids), run, ids_name)
    except LocalRunError:
        return {}


def _value(ctx: PatternContext, name: str) -> np.ndarray | None:
    """A tensor's value: a feed of the segment, an initializer, or fetched from the runs."""
    if name in ctx.run.feeds:
        return ctx.run.feeds[name]
    if name in ctx.run.index.initializers:
        return numpy_helper.to_array(ctx.run.index.initializers[name])
    if ctx.fetch is not None and (got := ctx.fetch(name)) is not None:
        return got[0]
    return None


@pattern_test
def resize_modes(ctx: PatternContext) -> list[Trial]:
    trials = []
    for i, op in _ops(ctx, "Resize", "Upsample"):
        mode = _text(_attr(op, "mode", b"nearest"))
        changes: list[tuple[str, str, dict[str, str]]] = []
        if op.op_type == "Resize":
            ctm = _text(_attr(op, "coordinate_transformation_mode", b"half_pixel"))
            changes += [("wrong_coordinates", f"coordinate_transformation_mode={alt} (model: {ctm})",
                         {"coordinate_transformation_mode": alt}) for alt in RESIZE_MODES if alt != ctm]
            if mode == "nearest":
                nm = _text(_attr(op, "nearest_mode", b"round_prefer_floor"))
                changes += [("wrong_coordinates", f"nearest_mode={alt} (model: {nm})", {"nearest_mode": alt})
                            for alt in NEAREST_MODES if alt != nm]
        changes += [("wrong_semantics", f"mode={alt} (model: {mode})", {"mode": alt})
                    for alt in ("nearest", "linear") if alt != mode]
        for pattern, what, attrs in changes:
            t = ctx.trial(pattern, f"{what} in {op.name}", nodes=_replace(ctx, i, _with_attr(op, **attrs)),
                          details={"node": op.name, **attrs})
            if t is not None:
                trials.append(t)
    return trials


@pattern_test
def softmax_axis(ctx: PatternContext) -> list[Trial]:
    trials = []
    for i, op in _ops(ctx, "Softmax", "LogSoftmax", "Hardmax"):
        shape = _shape_of(ctx, op.input[0])
        if shape is None:
            continue
        current = int(_attr(op, "axis", -1)) % max(len(shape), 1)
        for axis in range(len(shape)):
            if axis != current and shape[axis] > 1:
                t = ctx.trial("wrong_semantics", f"axis={axis} (model: {current}) in {op.name}",
                              nodes=_replace(ctx, i, _with_attr(op, axis=axis)), details={"node": op.name, "axis": axis})
                if t is not None:
                    trials.append(t)
    return trials


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _shape_of(ctx: PatternContext, name: str) -> tuple[int, ...] | None:
    """Shape of a tensor inside the segment: a feed, or the suspect's own output."""
    if name in ctx.run.feeds:
        return tuple(ctx.run.feeds[name].shape)
    if name in ctx.run.outputs:
        return tuple(ctx.run.outputs[name].shape)
    try:
        return tuple(ctx.run.rerun(outputs=[name])[name].shape)
    except LocalRunError:
        return None


@pattern_test
def nhwc_order(ctx: PatternContext) -> list[Trial]:
    """A rank>=3 input read in channel-last order before a flatten/reshape/matmul (MNN NC4HW4 → NHWC)."""
    if not any(n.op_type in FLATTENING_OPS for n in ctx.run.segment.nodes):
        return []
    trials = []
    for name in _float_feeds(ctx):
        v = ctx.run.feeds[name]
        if v.ndim < 3 or v.shape[1] == 1:
            continue
        feeds = dict(ctx.run.feeds)
        feeds[name] = np.ascontiguousarray(np.moveaxis(v, 1, -1)).reshape(v.shape)
        t = ctx.trial("permutation", f"{name} flattened in NHWC order instead of NCHW", feeds=feeds,
                      details={"input": name})
        if t is not None:
            trials.append(t)
    return trials


@pattern_test
def conv_weight_layout(ctx: PatternContext) -> list[Trial]:
    trials = []
    for _, op in _ops(ctx, "Conv", "ConvTranspose"):
        if len(op.input) < 2 or op.input[1] not in ctx.run.index.initializers:
            continue
        w = numpy_helper.to_array(ctx.run.index.initializers[op.input[1]])
        if w.ndim != 4:
            continue
        if w.shape[2] * w.shape[3] == 1:  # 1x1: only the channel swap changes anything
            swapped = np.ascontiguousarray(w.transpose(1, 0, 2, 3)).reshape(w.shape)
            t = ctx.trial("permutation", f"input and output channels swapped in {op.name}",
                          initializers={op.input[1]: swapped}, details={"node": op.name, "weight": op.input[1]})
            trials.extend([t] if t is not None else [])
            continue
        o, i, kh, kw = w.shape
        variants: dict[str, np.ndarray | None] = {
            "weights stored OHWI, read as OIHW": np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(o, i, kh, kw),
            "weights stored OIHW, read as OHWI": np.ascontiguousarray(w.reshape(o, kh, kw, i).transpose(0, 3, 1, 2)),
            "kernel transposed (HW swapped)": np.ascontiguousarray(w.transpose(0, 1, 3, 2)) if kh == kw else None,
            "input and output channels swapped": np.ascontiguousarray(w.transpose(1, 0, 2, 3)).reshape(o, i, kh, kw),
        }
        for label, alt in variants.items():
            if alt is not None:
                t = ctx.trial("permutation", f"{label} in {op.name}", initializers={op.input[1]: alt},
                              details={"node": op.name, "weight": op.input[1]})
                if t is not None:
                    trials.append(t)
    return trials


ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Elu", "Selu", "PRelu"}
NON_COMMUTATIVE = {"Sub", "Div", "Pow"}


@pattern_test
def fused_activation(ctx: PatternContext) -> list[Trial]:
    """A fused activation dropped (output = pre-activation) or added (ReLU/ReLU6 where the model has none):
    MNN fuses Conv/Deconvolution + bias + BN + ReLU into one op, and a backend can lose or invent the ReLU."""
    trials = []
    for i, op in _ops(ctx, *ACTIVATIONS):
        if not op.input or not op.output:
            continue
        ident = helper.make_node("Identity", [op.input[0]], [op.output[0]], name=op.name)
        t = ctx.trial("fused_activation_dropped", f"fused {op.op_type} {op.name} missing (output = pre-activation)",
                      nodes=_replace(ctx, i, ident), details={"node": op.name, "activation": op.op_type})
        if t is not None:
            trials.append(t)
    local = ctx.local.astype(np.float64)
    if np.isfinite(local).all() and local.size and float(local.min()) < 0.0 and not _ops(ctx, "Relu"):
        for label, alt in (("Relu", np.maximum(local, 0.0)), ("Relu6", np.clip(local, 0.0, 6.0))):
            trials.append(Trial("wrong_semantics", f"extra {label} applied to {ctx.run.op.name}'s output "
                                f"(clipped where the model is not)", ctx.score(alt), {"activation": label},
                                complexity=1))
    return trials


@pattern_test
def swapped_operands(ctx: PatternContext) -> list[Trial]:
    """The operands of a non-commutative binary op swapped (b - a for a - b, b / a for a / b)."""
    trials = []
    for i, op in _ops(ctx, *NON_COMMUTATIVE):
        if len(op.input) != 2 or op.input[0] == op.input[1]:
            continue
        new = copy.deepcopy(op)
        new.input[0], new.input[1] = op.input[1], op.input[0]
        t = ctx.trial("wrong_semantics", f"operands of {op.op_type} {op.name} swapped", nodes=_replace(ctx, i, new),
                      details={"node": op.name, "swapped": [op.input[1], op.input[0]]})
        if t is not None:
            trials.append(t)
    return trials


@pattern_test
def missing_bias(ctx: PatternContext) -> list[Trial]:
    trials = []
    for i, op in _ops(ctx, *BIAS_OPS):
        idx = BIAS_OPS[op.op_type]
        if len(op.input) <= idx or not op.input[idx]:
            continue
        new = copy.deepcopy(op)
        del new.input[idx:]
        t = ctx.trial("wrong_semantics", f"bias {op.input[idx]} left out of {op.name}", nodes=_replace(ctx, i, new),
                      details={"node": op.name, "bias": op.input[idx]})
        if t is not None:
            trials.append(t)
    return trials


@pattern_test
def scale_shift(ctx: PatternContext) -> list[Trial]:
    """target ≈ a·local + b, globally and per channel (axis 1) — a wrong scale/offset or BN folding."""
    t64 = ctx.target.astype(np.float64).reshape(-1)
    x64 = ctx.local.astype(np.float64).reshape(-1)
    if not (np.isfinite(t64).all() and np.isfinite(x64).all()) or x64.size < 2:
        return []
    trials = []
    a, b = _fit(x64, t64)
    span = float(np.abs(x64).max()) + 1e-12
    if abs(a) > 0.05 and (abs(a - 1.0) > 1e-2 or abs(b) > 1e-3 * span):
        shown_b = 0.0 if abs(b) < 1e-6 * span else b
        trials.append(Trial("scale_shift", f"target ≈ {a:.4g}·x + {shown_b:.4g}", ctx.score(a * x64 + b),
                            {"scale": float(f"{a:.6g}"), "shift": float(f"{shown_b:.6g}")}))
    local = ctx.local
    if local.ndim >= 2 and 1 < local.shape[1] <= 4096:
        c = local.shape[1]
        xs = np.moveaxis(local.astype(np.float64), 1, 0).reshape(c, -1)
        ts = np.moveaxis(ctx.target.reshape(local.shape).astype(np.float64), 1, 0).reshape(c, -1)
        fits = [_fit(xs[k], ts[k]) for k in range(c)]
        scales = np.array([f[0] for f in fits])
        if np.median(np.abs(scales)) > 0.05:
            pred = np.stack([fits[k][0] * xs[k] + fits[k][1] for k in range(c)])
            pred = np.moveaxis(pred.reshape((c, local.shape[0], *local.shape[2:])), 0, 1)
            trials.append(Trial("scale_shift", "per-channel scale and shift", ctx.score(pred),
                                {"scale_median": float(f"{np.median(scales):.6g}"),
                                 "scale_range": [float(f"{scales.min():.6g}"), float(f"{scales.max():.6g}")]},
                                complexity=1))
    return trials


@pattern_test
def constant_output(ctx: PatternContext) -> list[Trial]:
    t = ctx.target
    if t.size > 1 and np.isfinite(t).all() and float(np.ptp(t)) == 0.0 and float(np.ptp(ctx.local)) > 0.0:
        return [Trial("constant", f"every element equals {float(t.reshape(-1)[0]):.6g}", None,
                      {"value": float(t.reshape(-1)[0])}, True)]
    return []


@pattern_test
def permuted_values(ctx: PatternContext) -> list[Trial]:
    """Same multiset of values in other places (any permutation not named by a test above)."""
    if ctx.target.size < 4:
        return []
    st = np.sort(ctx.target.reshape(-1).astype(np.float64))
    sl = np.sort(ctx.local.reshape(-1).astype(np.float64))
    if not (np.isfinite(st).all() and np.isfinite(sl).all()):
        return []
    return [Trial("permutation", "same values in a different order (sorted values agree)",
                  metric_values(error_stats(st, sl))["sqnr_db"], {"sorted": True})]


def _fit(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    xm, tm = x.mean(), t.mean()
    var = float(np.dot(x - xm, x - xm))
    a = float(np.dot(x - xm, t - tm) / var) if var > 0 else 0.0
    return a, float(tm - a * xm)


def _match_level(ctx: PatternContext) -> float:
    return ctx.th.quant_pattern_match_db if ctx.quantized else ctx.th.pattern_match_db


def run_tests(ctx: PatternContext) -> tuple[Trial | None, list[Trial]]:
    """All trials (for evidence) and the best match, most specific pattern first."""
    trials: list[Trial] = []
    for test in TESTS:
        try:
            trials.extend(test(ctx))
        except Exception:  # a test that cannot run on this op must not stop the verdict
            continue
    level = _match_level(ctx)
    nominal = ctx.nominal_sqnr_db if ctx.nominal_sqnr_db is not None else -200.0
    for t in trials:
        if t.sqnr_db is not None:
            t.matched = t.matched or (t.sqnr_db >= level and t.sqnr_db >= nominal + ctx.th.pattern_margin_db)
    matched = [t for t in trials if t.matched]
    if not matched:
        return None, trials
    best = min(matched, key=lambda t: (PRIORITY.index(t.pattern), t.complexity,
                                       -(t.sqnr_db if t.sqnr_db is not None else 0.0)))
    return best, trials
