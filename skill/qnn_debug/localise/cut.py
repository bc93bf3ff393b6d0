"""Cut an ONNX graph: truncate it at a set of tensors, find the cut after each op, carve out decoder blocks.

Why cuts instead of single tensors: bisection over execution order with one probe tensor is wrong on any
graph with branches (a side branch after the faulty op does not depend on it and looks healthy, so the
search jumps past the fault). The *frontier* after op ``p`` — every tensor made at or before ``p`` that an
op after ``p`` still reads, plus the graph outputs made so far — carries everything later ops can see, so
"some frontier tensor is bad" is monotone in ``p`` as long as errors propagate, and the first ``p`` where it
turns bad is an op whose inputs were good and whose output is not.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import onnx
from onnx import helper

from ..errors import BadInputError
from ..onnx_graph import initializer_names, nodes_in_order, tensor_elem_types

# Decoder layer index in a node name, as exporters write it: /layers.3/..., /blocks.3/..., model.layers.3.
_LAYER = re.compile(r"(?:^|[/._:])(?:layers|blocks|layer|block|h)[._/](\d+)(?=[/._:]|$)")


@dataclass(frozen=True)
class CutPoint:
    """The graph just after one op: ``frontier`` is what the rest of the graph can still see."""

    index: int  # index among the cut points
    position: int  # the op's position in execution order
    op: str
    op_type: str
    outputs: tuple[str, ...]  # the op's judged outputs
    frontier: tuple[str, ...]


def cut_points(model: onnx.ModelProto, judged: set[str]) -> list[CutPoint]:
    """One cut point per op that produces a judged tensor (a float tensor the reference holds), in order.

    Tensors nothing reads and that are not graph outputs cannot influence the result, so they are left out.
    """
    nodes = nodes_in_order(model)
    graph_outputs = {o.name for o in model.graph.output}
    end = len(nodes)
    last_use: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            if name:
                last_use[name] = node.position
    for name in graph_outputs:
        last_use[name] = end
    points: list[CutPoint] = []
    live: dict[str, int] = {}  # judged tensor -> the position after which nobody reads it
    for node in nodes:
        for name in node.outputs:
            if name in judged and name in last_use and last_use[name] > node.position:
                live[name] = last_use[name]
        for name in [n for n, until in live.items() if until <= node.position]:
            del live[name]
        mine = tuple(o for o in node.outputs if o in judged)
        if not mine:
            continue
        frontier = tuple(live)
        if not frontier:
            continue
        points.append(CutPoint(len(points), node.position, node.name, node.op_type, mine, frontier))
    return points


def truncate(model: onnx.ModelProto, outputs: list[str]) -> onnx.ModelProto:
    """The sub-graph computing ``outputs`` from the graph inputs (names kept, unused inputs dropped)."""
    m = copy.deepcopy(model)
    produced = {o: n for n in m.graph.node for o in n.output if o}
    missing = [o for o in outputs if o not in produced and o not in {i.name for i in m.graph.input}]
    if missing:
        raise BadInputError(f"the model has no tensor named {missing[0]!r}", hint="pick a tensor the model computes")
    needed: set[int] = set()
    seen: set[str] = set()
    stack = list(outputs)
    index = {id(n): i for i, n in enumerate(m.graph.node)}
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = produced.get(name)
        if node is None:
            continue
        needed.add(index[id(node)])
        stack.extend(i for i in node.input if i)
        for attr in node.attribute:  # sub-graphs (If/Loop) read outer tensors by name
            for g in [attr.g, *attr.graphs]:
                stack.extend(i for sub in g.node for i in sub.input if i)
    keep = [n for i, n in enumerate(m.graph.node) if i in needed]
    return _rebuild(m, keep, [i for i in m.graph.input if i.name in seen], outputs)


def _rebuild(m: onnx.ModelProto, keep: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
             outputs: list[str], types: dict[str, int] | None = None) -> onnx.ModelProto:
    used = {i for n in keep for i in n.input} | {i for n in keep for a in n.attribute for g in [a.g, *a.graphs]
                                                 for s in g.node for i in s.input}
    types = types if types is not None else tensor_elem_types(m)
    inits = [t for t in m.graph.initializer if t.name in used]
    existing = {o.name: o for o in m.graph.output}
    outs = []
    for name in outputs:
        if name in existing:
            outs.append(existing[name])
        elif types.get(name):
            outs.append(helper.make_tensor_value_info(name, types[name], None))
        else:
            outs.append(onnx.ValueInfoProto(name=name))
    graph = helper.make_graph(keep, m.graph.name or "cut", inputs, outs, inits)
    cut = helper.make_model(graph, opset_imports=list(m.opset_import), producer_name="qnn-debug-cut")
    cut.ir_version = m.ir_version
    return cut


@dataclass
class Block:
    """Decoder layers ``first..last`` as a standalone graph's boundary."""

    first: int
    last: int
    positions: list[int] = field(default_factory=list)  # ops of the block, in execution order
    inputs: list[str] = field(default_factory=list)  # tensors the block reads from outside (hidden state first)
    outputs: list[str] = field(default_factory=list)  # tensors the block makes that outside ops read
    label: str = ""  # ops outside the layers: where they sit ("before layer 0", "between layers 0 and 1", ...)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        return f"layer {self.first}" if self.first == self.last else f"layers {self.first}..{self.last}"


def layer_of(node_name: str) -> int | None:
    """The decoder layer an exporter's node name puts the node in (``/layers.3/mlp/...`` → 3)."""
    found = _LAYER.findall(node_name)
    return int(found[0]) if found else None


def decoder_layers(model: onnx.ModelProto) -> dict[int, list[int]]:
    """Layer index → positions of its ops: from the node names where they carry the layer (LLM exports), else from
    the graph's structure (repeated attention between residual adds: :mod:`.structure`, e.g. llmexport's
    ``visual.onnx``)."""
    layers: dict[int, list[int]] = {}
    for node in nodes_in_order(model):
        layer = layer_of(node.name)
        if layer is not None:
            layers.setdefault(layer, []).append(node.position)
    if not layers:
        from .structure import structural_layers

        return structural_layers(model)
    return layers


def block(model: onnx.ModelProto, first: int, last: int | None = None) -> Block:
    """The boundary of layers ``first..last``: what they read from outside and what outside reads from them."""
    last = first if last is None else last
    layers = decoder_layers(model)
    if not layers:
        raise BadInputError("the model has no decoder layers: no layer index in its node names (/layers.N/ or "
                            "/blocks.N/) and no repeated attention between residual adds",
                            hint="block localisation needs an LLM export; use `qnn-debug bisect` for other models")
    if first not in layers or last not in layers or last < first:
        raise BadInputError(f"the model has no layers {first}..{last}",
                            hint=f"layers present: {min(layers)}..{max(layers)}")
    inside = sorted(p for k, ps in layers.items() if first <= k <= last for p in ps)
    found = positions_block(model, inside, first, last)
    if not found.outputs:
        raise BadInputError(f"nothing outside layers {first}..{last} reads their results", hint="check the layer range")
    return found


def positions_block(model: onnx.ModelProto, positions: list[int], first: int, last: int, label: str = "") -> Block:
    """The boundary of the ops at ``positions`` (execution order): what they read from outside and what outside
    reads from them (or the graph returns)."""
    nodes = nodes_in_order(model)
    inside = sorted(positions)
    members = set(inside)
    inits = initializer_names(model)
    const_out = {o for n in nodes if n.op_type == "Constant" for o in n.outputs}
    made = {o for p in inside for o in nodes[p].outputs}
    reads: list[str] = []
    for p in inside:
        for name in nodes[p].inputs:
            if name and name not in made and name not in inits and name not in const_out and name not in reads:
                reads.append(name)
    graph_outputs = {o.name for o in model.graph.output}
    outside_reads = {i for n in nodes if n.position not in members for i in n.inputs}
    outs = [o for p in inside for o in nodes[p].outputs if o in outside_reads or o in graph_outputs]
    return Block(first, last, inside, reads, outs, label)


def block_model(model: onnx.ModelProto, blk: Block, shapes: dict[str, tuple[list[int], int]]) -> onnx.ModelProto:
    """``blk`` as a standalone ONNX graph; ``shapes`` gives each boundary input's (dims, ONNX elem type)."""
    m = copy.deepcopy(model)
    nodes = list(m.graph.node)
    members = set(blk.positions)
    needed_consts = {i for p in blk.positions for i in nodes[p].input}
    keep = [n for i, n in enumerate(nodes) if i in members
            or (n.op_type == "Constant" and any(o in needed_consts for o in n.output))]
    inputs = []
    for name in blk.inputs:
        if name not in shapes:
            raise BadInputError(f"no value for the block input {name!r}", hint="the reference run must provide it")
        dims, elem = shapes[name]
        inputs.append(helper.make_tensor_value_info(name, elem, dims))
    return _rebuild(m, keep, inputs, list(blk.outputs))
