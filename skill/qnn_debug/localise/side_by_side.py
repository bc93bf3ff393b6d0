"""Several independent pieces of one graph in a single ONNX model, each fed reference values.

Why: on the HTP simulator each session costs about a second however small its graph, so running 8
decoder blocks (or the 70 ops of one block) as separate sessions is dominated by that overhead. Put side
by side in one graph — every piece's own tensors renamed ``<name>@<tag><k>``, the tensors it reads from
outside left as shared graph inputs fed with the reference — they run in one session, and each piece
still sees only reference inputs, so its error is its own.
"""

from __future__ import annotations

import copy

import onnx
from onnx import helper

from ..onnx_graph import initializer_names, nodes_in_order


class Feeders:
    """Finds, for an op, the ops making any input that has no reference value (edited-in nodes)."""

    def __init__(self, model: onnx.ModelProto, known: set[str]):
        self.nodes = nodes_in_order(model)
        self.producer = {o: n.position for n in self.nodes for o in n.outputs}
        self.skip = known | initializer_names(model)

    def piece(self, position: int) -> list[int]:
        keep = {position}
        stack = [position]
        while stack:
            for name in self.nodes[stack.pop()].inputs:
                p = self.producer.get(name)
                if name and name not in self.skip and p is not None and p not in keep:
                    keep.add(p)
                    stack.append(p)
        return sorted(keep)


def side_by_side(model: onnx.ModelProto, pieces: list[list[int]], outputs: list[list[str]],
                 inputs: dict[str, tuple[list[int], int]], tag: str,
                 types: dict[str, int]) -> tuple[onnx.ModelProto, list[dict[str, str]]]:
    """One model holding every piece (node positions of ``model``); returns it and, per piece, original → new
    names of its ``outputs``. ``inputs`` gives (dims, elem type) of every outside tensor a piece may read,
    ``types`` the element type of every tensor of ``model`` (for the graph outputs)."""
    m = model
    nodes = list(m.graph.node)
    inits = {t.name for t in m.graph.initializer}
    const_nodes = {o: n for n in nodes if n.op_type == "Constant" for o in n.output}
    new_nodes: list[onnx.NodeProto] = []
    used_inputs: list[str] = []
    used_consts: set[str] = set()
    maps: list[dict[str, str]] = []
    for k, (positions, outs) in enumerate(zip(pieces, outputs, strict=True)):
        made = {o for p in positions for o in nodes[p].output if o}
        rename = {o: f"{o}@{tag}{k}" for o in made}
        for p in positions:
            node = copy.deepcopy(nodes[p])
            node.name = f"{node.name}@{tag}{k}"
            for i, name in enumerate(node.input):
                if name in rename:
                    node.input[i] = rename[name]
                elif name and name not in inits:
                    if name in const_nodes:
                        used_consts.add(name)
                    elif name not in used_inputs:
                        used_inputs.append(name)
            for i, name in enumerate(node.output):
                if name:
                    node.output[i] = rename[name]
            new_nodes.append(node)
        maps.append({o: rename[o] for o in outs if o in rename})
    consts = [copy.deepcopy(n) for n in nodes if n.op_type == "Constant" and any(o in used_consts for o in n.output)]
    referenced = {i for n in [*consts, *new_nodes] for i in n.input}
    graph_inputs = [helper.make_tensor_value_info(n, inputs[n][1], inputs[n][0]) for n in used_inputs]
    graph_outputs = [helper.make_tensor_value_info(new, types[orig], None) if types.get(orig)
                     else onnx.ValueInfoProto(name=new) for mp in maps for orig, new in mp.items()]
    graph = helper.make_graph([*consts, *new_nodes], f"{m.graph.name or 'model'}_{tag}", graph_inputs, graph_outputs,
                              [copy.deepcopy(t) for t in m.graph.initializer if t.name in referenced])
    out = helper.make_model(graph, opset_imports=list(m.opset_import), producer_name="qnn-debug-side-by-side")
    out.ir_version = m.ir_version
    return out, maps
