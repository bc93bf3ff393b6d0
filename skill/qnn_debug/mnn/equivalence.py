"""Which tensors of an MNN QNN dump hold the values of which model tensors (facts §1.7–1.8).

The dump reader records these on the imported tensors (``runstore.Equivalence``) so that ``compare``
aligns them with the reference tensor they stand for instead of listing them as unexplained:

- ``t<N>_cast`` / ``t<N>_dequant``: the backend's Cast/Dequantize copy of graph input or output ``t<N>``
  (the value as the target held it);
- a layout-only op (``model_reader.LAYOUT_ONLY_OPS``: ConvertTensor, OpType 129, NC4HW4 ↔ NCHW) has the
  same values on its input and output, so each side, and each tensor of a chain of them, stands for the others;
- ``<node>_ReluTensor`` of a Convolution/ConvolutionDepthwise with a fused ReLU/ReLU6
  (``QNNConvolution``/``QNNConvDepthwise``: ``Conv2d`` into the stage, then ``Relu``/``Relu6``) is the
  convolution's result before the activation; which source-graph tensor that is needs the ONNX model
  (``compare.align``);
- a tensor MNN names after one model tensor but writes with an op named after a later model node (the
  converter fuses Sigmoid + Mul into a SiLU ``UnaryOp`` named after the Mul, and its output, through a
  ConvertTensor, keeps the name of the MatMul output it read) holds that node's output: a fused op is
  compared with the last node it covers, which ``compare.align`` confirms with the model's graph.
"""

from __future__ import annotations

from collections import deque

from ..runstore import Equivalence
from .model_reader import LAYOUT_ONLY_OPS, MnnModel, MnnOp

# stage name → op types whose stage of that name is the result before a fused activation
PRE_ACTIVATION_STAGES: dict[str, frozenset[str]] = {
    "ReluTensor": frozenset({"Convolution", "ConvolutionDepthwise"}),
}


def layout_class(model: MnnModel, index: int) -> list[int]:
    """Tensors joined to ``index`` by layout-only ops (either direction), nearest first, ``index`` excluded."""
    links = model.layout_links
    seen, order = {index}, []
    queue = deque([index])
    while queue:
        for nxt in links.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                order.append(nxt)
                queue.append(nxt)
    return order


def _names(model: MnnModel, indexes: list[int]) -> list[str]:
    return [n for i in indexes if (n := model.tensor_name(i)) is not None]


def of_tensor(model: MnnModel, index: int) -> Equivalence | None:
    """A plain ``t<N>``: the tensors a layout-only op copies it to or from, if any."""
    same = _names(model, layout_class(model, index))
    if not same:
        return None
    return Equivalence(kind="layout", of=same, note=f"the values of {same[0]} in another layout (MNN ConvertTensor)")


def of_cast(model: MnnModel, index: int, stage: str) -> Equivalence | None:
    """``t<N>_cast`` / ``t<N>_dequant``: the backend's copy of ``t<N>`` (and so of its layout copies)."""
    name = model.tensor_name(index)
    if name is None:
        return None
    same = [name, *_names(model, layout_class(model, index))]
    what = "Dequantize" if stage == "dequant" else "Cast"
    return Equivalence(kind="cast", of=same, note=f"{name} as the target held it (backend {what} stage)")


def of_stage(model: MnnModel, op: MnnOp, stage: str) -> Equivalence | None:
    """``<node>_<stage>``: a known pre-activation stage of ``op``, else None (not explained)."""
    if op.type_name not in PRE_ACTIVATION_STAGES.get(stage, frozenset()):
        return None
    outs = [o for o in op.outputs if o >= 0]
    same = _names(model, outs + [i for o in outs for i in layout_class(model, o)])
    if not same:
        return None
    return Equivalence(kind="pre_activation", of=same,
                       note=f"{op.name} ({op.type_name}) before its fused activation, whose output is {same[0]}")


def of_fused_output(model: MnnModel, index: int, node_outputs: dict[str, list[str]],
                    own_node: str | None) -> Equivalence | None:
    """Tensor ``index``, named after a model tensor made by ``own_node``, when the op that writes it (through
    layout-only copies) carries the name of another model node: that node's outputs (``node_outputs``:
    model node name → its output tensors), else None."""
    name = model.tensor_name(index)
    op = model.producer(index)
    while op is not None and op.type_name in LAYOUT_ONLY_OPS and op.inputs and op.inputs[0] >= 0:
        op = model.producer(op.inputs[0])
    if name is None or op is None or op.name == own_node or op.name not in node_outputs:
        return None
    outs = node_outputs[op.name]
    if not outs or name in outs:
        return None
    return Equivalence(kind="fused_output", of=list(outs),
                       note=f"MNN's {op.name} ({op.type_name}) wrote it under the name {name}: a fused op whose "
                            f"last model node makes {outs[0]}")
