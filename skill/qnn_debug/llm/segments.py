"""Which ops of an LLM ``.mnn`` compilefornpu would put into NPU segments, and which tensors are integers.

compilefornpu walks the op list in order and cuts it at break ops (control flow, Where/Segment/Unique/NMS,
and — while ``KVCACHE_SIZE_LIMIT`` is 0 — KV-cache ``Attention`` and ``LinearAttention``, plus the ops
between ``attention_mask`` and such an Attention); a run without a Convolution stays on CPU. Everything
else in a run goes to the QNN backend. Ops that only compute shapes from constants are folded at resize
time and never reach a backend, so they are left out of the op checks.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..mnn.model_reader import MnnModel, MnnOp
from .mnn_extras import MnnExtras

CONTROL_BREAKS = frozenset({"If", "Where", "Segment", "Unique", "NonMaxSuppressionV2"})
SHAPE_SOURCES = frozenset({"Shape", "Rank", "Size"})
INT_SOURCES = frozenset({"Shape", "Rank", "Size", "ArgMax", "ArgMin"})
INT_PASS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "ConvertTensor", "StridedSlice", "SliceTf", "Slice",
                      "Permute", "Transpose", "Concat", "Pack", "Unpack", "BroadcastTo", "Tile", "Split"})
GATHERS = frozenset({"GatherV2", "Gather", "GatherElements", "GatherND"})
NOT_EXECUTED = frozenset({"Input", "Const", "TrainableParam"})


class Segment(BaseModel):
    index: int
    npu: bool  # holds a Convolution: compiled into a QNN graph
    ops: list[int] = Field(default_factory=list)  # op positions


class Partition(BaseModel):
    kv_limit: int
    breaks: list[int]
    mask_breaks: list[int]
    segments: list[Segment]
    folded: list[int]  # shape-only ops (constant at resize time)

    @property
    def npu_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.npu]


def _is_break(op: MnnOp, extras: MnnExtras, kv_limit: int) -> bool:
    if op.type_name in CONTROL_BREAKS or op.type_name == "While":
        return True
    if kv_limit > 0:
        return False
    if op.type_name == "Attention":
        kv = extras.ops.get(op.position)
        return kv is None or kv.kv_cache is None or bool(kv.kv_cache)
    return op.type_name == "LinearAttention"


def _folded(model: MnnModel) -> set[int]:
    """Ops whose inputs are all constants or shape values (their outputs are known at resize time)."""
    const: set[int] = set()
    folded: set[int] = set()
    for op in model.ops:
        if op.type_name == "Const":
            const.update(op.outputs)
        elif op.type_name in SHAPE_SOURCES or (op.inputs and all(i in const for i in op.inputs if i >= 0)
                                                 and op.type_name not in NOT_EXECUTED):
            folded.add(op.position)
            const.update(op.outputs)
    return folded


def _mask_breaks(model: MnnModel, break_attn: list[MnnOp]) -> set[int]:
    """Ops on a path from ``attention_mask`` to a break Attention (compilefornpu makes them breaks too)."""
    mask = {i.index for i in model.inputs if "attention_mask" in i.name}
    if not mask or not break_attn:
        return set()
    dep = set(mask)
    for op in model.ops:
        if op.type_name in ("Attention", "LinearAttention"):
            continue
        if any(i in dep for i in op.inputs):
            dep.update(op.outputs)
    found: set[int] = set()
    for attn in break_attn:
        todo = [i for i in attn.inputs if i in dep and i not in mask]
        seen: set[int] = set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            prod = model.producer(t)
            if prod is None or prod.type_name in NOT_EXECUTED:
                continue
            found.add(prod.position)
            todo.extend(i for i in prod.inputs if i in dep and i not in mask)
    return found


def partition(model: MnnModel, extras: MnnExtras, kv_limit: int) -> Partition:
    folded = _folded(model)
    breaks = [op.position for op in model.ops if _is_break(op, extras, kv_limit)]
    attn = [model.ops[p] for p in breaks if model.ops[p].type_name in ("Attention", "LinearAttention")]
    mask_breaks = _mask_breaks(model, attn) - set(breaks)
    cut = set(breaks) | mask_breaks
    segments: list[Segment] = []
    current: list[int] = []
    for op in model.ops:
        if op.type_name in NOT_EXECUTED:
            continue
        if op.position in cut:
            if current:
                segments.append(Segment(index=len(segments), npu=False, ops=current))
                current = []
            continue
        current.append(op.position)
    if current:
        segments.append(Segment(index=len(segments), npu=False, ops=current))
    for s in segments:
        s.npu = any(model.ops[p].type_name == "Convolution" for p in s.ops)
    return Partition(kv_limit=kv_limit, breaks=breaks, mask_breaks=sorted(mask_breaks), segments=segments,
                     folded=sorted(folded))


def dead_ops(model: MnnModel) -> set[int]:
    """Positions of ops none of whose outputs reaches a model output: MNN's module loader keeps only the ops the
    outputs need, so these never reach the QNN backend (an unused C4 RoPE cannot crash compilefornpu)."""
    live = {i for i in (model.tensor_index(n) for n in model.output_names) if i is not None}
    dead: set[int] = set()
    if not live:
        return dead  # outputs unknown: nothing can be called dead
    for op in reversed(model.ops):
        if op.outputs and not any(o in live for o in op.outputs):
            dead.add(op.position)
            continue
        live.update(i for i in op.inputs if i >= 0)
    return dead


def integer_tensors(model: MnnModel, extras: MnnExtras) -> dict[int, str]:
    """Tensor index → why it holds integers (int model input, Gather index, shape value, or derived)."""
    why: dict[int, str] = {}
    for i in model.inputs:
        if i.dtype.startswith(("int", "uint")) or i.dtype == "bool":
            why[i.index] = f"model input of type {i.dtype}"
    const = {t for op in model.ops if op.type_name == "Const" for t in op.outputs}
    for op in model.ops:
        if op.type_name in INT_SOURCES:
            for t in op.outputs[:1]:
                why.setdefault(t, f"output of {op.type_name}")
        elif op.type_name in GATHERS and len(op.inputs) > 1 and op.inputs[1] >= 0:
            why.setdefault(op.inputs[1], f"index input of {op.type_name} {op.name}")
        elif op.type_name == "Cast":
            dst = extras.ops.get(op.position)
            if dst is not None and dst.cast_to and dst.cast_to.startswith(("int", "uint")):
                for t in op.outputs:
                    why.setdefault(t, f"Cast to {dst.cast_to}")
        elif op.type_name in INT_PASS and op.inputs and op.inputs[0] in why:
            for t in op.outputs:
                why.setdefault(t, f"{op.type_name} of an integer tensor")
        elif op.type_name == "BinaryOp" and op.inputs and any(i in why for i in op.inputs) \
                and all(i in why or i in const for i in op.inputs):
            for t in op.outputs:
                why.setdefault(t, "integer arithmetic (BinaryOp on integer tensors)")
    return why
