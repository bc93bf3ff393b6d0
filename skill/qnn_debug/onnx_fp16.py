"""Does an ONNX model compute in fp16, and the same graph lifted to fp32.

An fp16 export (``model.half()`` before ``torch.onnx.export``, an fp16 conversion of an fp32 model) keeps
its weights, constants and activations in float16: ONNX Runtime then computes in fp16 while MNN's CPU
computes the same graph in fp32, and the two legitimately differ by the model's own fp16 rounding.
:func:`fp16_signs` reads that from the graph (float16 initializers, constants, inputs/outputs and
``Cast(to=FLOAT16)`` nodes; never from names); :func:`lift_to_fp32` is the same graph with every float16
turned float32, whose ORT run measures how far the model's own fp16 arithmetic moves each tensor.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, numpy_helper

if TYPE_CHECKING:
    from collections.abc import Iterator

    import onnx

FP16 = TensorProto.FLOAT16
FP32 = TensorProto.FLOAT
# Ops whose attribute names the element type of what they make (Cast's `to`, the generators' `dtype`).
_TYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
               "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Multinomial": "dtype",
               "Bernoulli": "dtype"}
_VALUE_ATTRS = ("value",)  # Constant and ConstantOfShape


@dataclass(frozen=True)
class Fp16Signs:
    """What in the graph says it computes in fp16 (counts over the main graph and its subgraphs)."""

    initializers: int = 0
    constants: int = 0
    inputs: int = 0
    outputs: int = 0
    casts: int = 0

    def any(self) -> bool:
        return bool(self.initializers or self.constants or self.inputs or self.outputs or self.casts)

    def words(self) -> str:
        """'18 float16 initializers, 27 Casts to float16': the evidence, for the report."""
        parts = [(self.initializers, "float16 initializer", "float16 initializers"),
                 (self.constants, "float16 constant", "float16 constants"),
                 (self.inputs, "float16 input", "float16 inputs"), (self.outputs, "float16 output", "float16 outputs"),
                 (self.casts, "Cast to float16", "Casts to float16")]
        return ", ".join(f"{n} {one if n == 1 else many}" for n, one, many in parts if n)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _elem(v: onnx.ValueInfoProto) -> int:
    return int(v.type.tensor_type.elem_type) if v.type.HasField("tensor_type") else 0


def fp16_signs(model: onnx.ModelProto) -> Fp16Signs | None:
    """The signs that ``model`` computes in fp16, or None when it has none (an fp32 model)."""
    init = const = ins = outs = casts = 0
    for g in _graphs(model.graph):
        inits = {i.name for i in g.initializer}
        init += sum(1 for i in g.initializer if i.data_type == FP16)
        ins += sum(1 for v in g.input if v.name not in inits and _elem(v) == FP16)
        outs += sum(1 for v in g.output if _elem(v) == FP16)
        for node in g.node:
            type_attr = _TYPE_ATTRS.get(node.op_type)
            for attr in node.attribute:
                if type_attr is not None and attr.name == type_attr and attr.i == FP16:
                    casts += node.op_type == "Cast"
                    const += node.op_type != "Cast"
                elif attr.name == "value" and attr.HasField("t") and attr.t.data_type == FP16:
                    const += 1
    signs = Fp16Signs(initializers=init, constants=const, inputs=ins, outputs=outs, casts=casts)
    return signs if signs.any() else None


def _lift_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    lifted: onnx.TensorProto = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)
    return lifted


def lift_to_fp32(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every float16 made float32: initializers, constants, graph inputs, outputs and
    value_info, ``Cast(to=FLOAT16)`` and the generators' ``dtype``. Names are kept, so its tensors align with the
    original's; feed it the original's inputs as float32."""
    m = copy.deepcopy(model)
    for g in _graphs(m.graph):
        for i, init in enumerate(g.initializer):
            if init.data_type == FP16:
                g.initializer[i].CopyFrom(_lift_tensor(init))
        for v in [*g.input, *g.output, *g.value_info]:
            if _elem(v) == FP16:
                v.type.tensor_type.elem_type = FP32
        for node in g.node:
            type_attr = _TYPE_ATTRS.get(node.op_type)
            for attr in node.attribute:
                if type_attr is not None and attr.name == type_attr and attr.i == FP16:
                    attr.i = FP32
                elif attr.name in _VALUE_ATTRS and attr.HasField("t") and attr.t.data_type == FP16:
                    attr.t.CopyFrom(_lift_tensor(attr.t))
    return m


def lift_feeds(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs of the lifted graph: float16 arrays as float32 (same values), the rest unchanged."""
    return {k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in feeds.items()}
