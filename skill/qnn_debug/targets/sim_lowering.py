"""Ops the HTP simulator refuses but MNN runs, lowered the way MNN's converter lowers them before a simulator run.

QNN has no ReduceSumSquare; MNN's ONNX converter turns it into a square (``UnaryOp`` SQUARE) followed by a sum
(``Reduction`` SUM), which its QNN backend then runs. The simulator run gets the same: ``ReduceSum(Mul(x, x))``
with the same axes and keepdims, under the original node and output names so the run aligns with the baseline
by name (the square is one extra tensor, ``<output>/square``). Each rewrite is a warning of the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper, numpy_helper


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def lower_for_simulator(model: Any) -> list[str]:
    """Rewrite ``model`` in place; one warning per rewritten node (empty: nothing to do)."""
    opset = _opset(model)
    nodes = list(model.graph.node)
    if not any(n.op_type == "ReduceSumSquare" and n.domain in ("", "ai.onnx") for n in nodes):
        return []
    out: list[Any] = []
    warnings: list[str] = []
    for node in nodes:
        if node.op_type != "ReduceSumSquare" or node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            out.append(node)
            continue
        y = node.output[0]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        inputs = [f"{y}/square", *node.input[1:]]
        axes = attrs.pop("axes", None)
        if axes is not None and opset >= 13:  # ReduceSum takes its axes as an input from opset 13 on
            name = f"{y}/axes"
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(axes, dtype=np.int64), name))
            inputs = [inputs[0], name]
        elif axes is not None:
            attrs["axes"] = axes
        out.append(helper.make_node("Mul", [node.input[0], node.input[0]], [f"{y}/square"], name=f"{node.name}/square"))
        out.append(helper.make_node("ReduceSum", inputs, [y], name=node.name, **attrs))
        warnings.append(f"ReduceSumSquare {node.name or y!r} rewritten to ReduceSum(Mul(x, x)) for the HTP simulator "
                        f"(QNN has no ReduceSumSquare; MNN's converter lowers it the same way, to a square and a sum)")
    del model.graph.node[:]
    model.graph.node.extend(out)
    return warnings
