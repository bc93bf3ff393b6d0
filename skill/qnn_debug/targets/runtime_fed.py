"""Which inputs of a refused node QNN needs as constants but the graph computes from its own inputs at run time.

Why: QNN builds static graphs; a Slice whose ``starts`` come from a graph input (llmexport's ``logits_index``
picking the last token), or a Reshape whose shape is computed, has an output shape that depends on data, and the
QNN EP refuses it ("Cannot get shape") together with everything downstream. Pointing at the op's constraints
does not help there (the same op with constant inputs is accepted); what helps is knowing WHICH input is fed
at run time and from WHERE, and narrowing without that part of the graph.
"""

from __future__ import annotations

from pydantic import BaseModel

# op type -> {input slot: name} that QNN needs known when the graph is built
STATIC_SLOTS: dict[str, dict[int, str]] = {
    "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
    "Reshape": {1: "shape"},
    "Expand": {1: "shape"},
    "Tile": {1: "repeats"},
    "Pad": {1: "pads", 3: "axes"},
    "Resize": {1: "roi", 2: "scales", 3: "sizes"},
    "TopK": {1: "k"},
    "Range": {0: "start", 1: "limit", 2: "delta"},
    "ConstantOfShape": {0: "shape"},
    "OneHot": {1: "depth"},
    "Split": {1: "split"},
    "Squeeze": {1: "axes"},
    "Unsqueeze": {1: "axes"},
    "ReduceMean": {1: "axes"},
    "ReduceSum": {1: "axes"},
    "ReduceMax": {1: "axes"},
}


class RuntimeFedInput(BaseModel):
    node: str
    op_type: str
    slot: str
    graph_inputs: list[str]


def runtime_fed_inputs(model: bytes | str, nodes: list[str]) -> list[RuntimeFedInput]:
    """For each named node, the static-required inputs that depend on graph inputs (empty when unreadable)."""
    import onnx

    try:
        graph = (onnx.load_from_string(model) if isinstance(model, bytes)
                 else onnx.load(model, load_external_data=False)).graph
    except Exception:  # the session already read the model; a second reading is only for a better hint
        return []
    # a Shape/Size of a tensor is known when the graph is built (static input shapes): not a runtime value
    consts = ({i.name for i in graph.initializer}
              | {o for n in graph.node if n.op_type in ("Constant", "Shape", "Size") for o in n.output})
    graph_inputs = {i.name for i in graph.input} - consts
    producer = {o: n for n in graph.node for o in n.output}
    memo: dict[str, frozenset[str]] = {}

    def sources(tensor: str) -> frozenset[str]:
        """The graph inputs ``tensor`` is computed from (iterative: decoder graphs are deep)."""
        stack, order, queued = [tensor], [], set()
        while stack:
            t = stack.pop()
            if t in memo or t in queued:
                continue
            queued.add(t)
            order.append(t)
            node = producer.get(t)
            if node is not None:
                stack.extend(i for i in node.input if i and i not in memo)
        for t in reversed(order):
            node = producer.get(t)
            if t in graph_inputs:
                memo[t] = frozenset([t])
            elif node is None or t in consts:
                memo[t] = frozenset()
            else:
                memo[t] = frozenset().union(*(memo.get(i, frozenset()) for i in node.input if i))
        return memo[tensor]

    wanted = set(nodes)
    found = []
    for node in graph.node:
        if node.name not in wanted:
            continue
        for slot, label in STATIC_SLOTS.get(node.op_type, {}).items():
            if slot < len(node.input) and node.input[slot] and (fed := sources(node.input[slot])):
                found.append(RuntimeFedInput(node=node.name, op_type=node.op_type, slot=label, graph_inputs=sorted(fed)))
    return found


def narrowing_hint(fed: list[RuntimeFedInput], node_names: list[str], model: bytes | str) -> str:
    """What to do when the refusal comes from a runtime-fed input rather than from the op itself; the command names
    the model file when there is one (else a quoted ``$MODEL`` the sentence explains)."""
    import shlex

    first = fed[0]
    path = shlex.quote(model) if isinstance(model, str) else '"$MODEL"'
    also = "" if isinstance(model, str) else " (MODEL: the .onnx model)"
    where = (f"{first.node} ({first.op_type}) takes its {first.slot} from graph input(s) "
             f"{', '.join(first.graph_inputs)} at run time, so its output shape depends on data and QNN refuses it "
             "with everything after it (the same op with constant inputs is accepted)")
    decoder = any("/layers." in n for n in [*node_names, first.node]) or any(
        name in ("logits_index", "position_ids") for name in first.graph_inputs)
    step = (f"`qnn-debug localise-blocks {path}`{also} runs every decoder block on the simulator without that part"
            if decoder else f"`qnn-debug bisect {path} --target htp-sim`{also} narrows on the parts before it")
    return f"{where}; {step}, or make that input a constant in a copy of the model"
