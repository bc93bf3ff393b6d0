"""Transformer layers found from the graph itself, for exports whose node names carry no layer index.

llmexport's ``visual.onnx`` names its block internals ``/norm1_2/...``, ``/MatMul_5`` ... (torch's tracer numbering),
so :func:`.cut.layer_of` finds nothing. The structure is plain though: each layer is one attention (a ``Softmax``)
between two residual ``Add`` s on the hidden-state chain. Here:

1. anchors: the ``Softmax`` nodes in execution order (at least two);
2. residual adds: ``Add(x, y)`` where ``x`` is an op's result read elsewhere too (not a graph input such as the
   mask, which everything later depends on) and ``y`` is computed from ``x`` through at least one
   ``MatMul``/``Gemm`` (a sub-layer's output added back onto its input);
3. layer ``k`` ends at the last residual add before anchor ``k + 1`` (the last layer: as many residual adds after
   its anchor as the first layer has); it starts with the residual stream its first residual add reads;
4. its ops: everything in that span computed from its residual stream, plus the helpers in the span whose
   results only the layer reads (shape arithmetic, rotary reshapes, constants). Other ops in the span (a deepstack
   merger reading the residual stream, say) stay outside the layers, as do the ops before the first layer and after
   the last.
"""

from __future__ import annotations

from collections import deque

import onnx

from ..onnx_graph import NodeInfo, nodes_in_order

WEIGHTED = {"MatMul", "Gemm", "Conv"}


def _producers(nodes: list[NodeInfo]) -> dict[str, int]:
    return {o: n.position for n in nodes for o in n.outputs if o}


def _consumers(nodes: list[NodeInfo]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for n in nodes:
        for i in n.inputs:
            if i:
                out.setdefault(i, []).append(n.position)
    return out


def _computed_from(nodes: list[NodeInfo], prod: dict[str, int], source: str, target: str) -> bool:
    """Whether ``target`` is computed from ``source`` through a weighted op (walking back from ``target``)."""
    start = prod.get(target)
    floor = prod.get(source, -1)
    if start is None:
        return False
    seen: set[tuple[int, bool]] = set()
    stack = [(start, nodes[start].op_type in WEIGHTED)]
    while stack:
        p, weighted = stack.pop()
        if (p, weighted) in seen:
            continue
        seen.add((p, weighted))
        for i in nodes[p].inputs:
            if i == source and weighted:
                return True
            q = prod.get(i)
            if q is not None and q > floor:
                stack.append((q, weighted or nodes[q].op_type in WEIGHTED))
    return False


def structural_layers(model: onnx.ModelProto) -> dict[int, list[int]]:
    """Layer index → positions of its ops (empty when the graph has no repeated attention layers)."""
    nodes = nodes_in_order(model)
    anchors = [n.position for n in nodes if n.op_type == "Softmax"]
    if len(anchors) < 2:
        return {}
    prod, cons = _producers(nodes), _consumers(nodes)
    residual: list[tuple[int, str]] = []  # (position, the residual stream it reads)
    for n in nodes:
        if n.op_type != "Add" or len(n.inputs) != 2 or n.position < anchors[0]:
            continue
        for x, y in ((n.inputs[0], n.inputs[1]), (n.inputs[1], n.inputs[0])):
            made = x in prod and nodes[prod[x]].op_type != "Constant"  # not a graph input (the mask) or a weight
            if made and len(cons.get(x, [])) >= 2 and _computed_from(nodes, prod, x, y):
                residual.append((n.position, x))
                break
    spans: list[list[tuple[int, str]]] = []
    for k, a in enumerate(anchors):
        nxt = anchors[k + 1] if k + 1 < len(anchors) else len(nodes)
        spans.append([r for r in residual if a < r[0] < nxt])
    per_layer = len(spans[0])
    if per_layer == 0 or any(not s for s in spans):
        return {}
    spans[-1] = spans[-1][:per_layer]
    layers: dict[int, list[int]] = {}
    prev_end = -1
    for k, span in enumerate(spans):
        end = span[-1][0]
        stream = span[0][1]
        start = prod.get(stream, -1)
        members: set[int] = set()
        queue = deque(cons.get(stream, []))
        while queue:  # computed from the residual stream, up to the layer's last residual add
            p = queue.popleft()
            if p in members or p > end:
                continue
            members.add(p)
            for o in nodes[p].outputs:
                queue.extend(cons.get(o, []))
        if k > 0 and start > prev_end:  # the reshape between two layers belongs to the next
            members.add(start)
        lower = prev_end if k > 0 else start  # nothing before the first layer's residual stream
        for p in range(end, lower, -1):  # helpers only the layer reads
            if p in members:
                continue
            readers = [q for o in nodes[p].outputs for q in cons.get(o, [])]
            if readers and all(q in members for q in readers):
                members.add(p)
        layers[k] = sorted(members)
        prev_end = end
    return layers
