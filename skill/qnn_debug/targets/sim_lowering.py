"""Ops the HTP simulator refuses but MNN runs, lowered the way MNN's converter lowers them before a simulator run.

``Erf`` (the exact GELU of llmexport's ``visual.onnx`` mergers): the QNN execution provider has no Erf, while
MNN runs it (its converter fuses the exact GELU into one ``GELU`` op that its QNN backend maps to QNN's Gelu). The
simulator run gets ``erf`` as Abramowitz & Stegun 7.1.26 in ops it has (Abs, Div, Mul, Add, Exp, Sub, Less, Where;
error below 1.5e-7, far under fp16's resolution), the last op keeping the node's name and output.

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


ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf_nodes(node: Any) -> tuple[list[Any], list[Any]]:
    """``erf(x)`` as A&S 7.1.26: sign(x)·(1 − t·P(t)·exp(−x²)), t = 1 / (1 + p·|x|)."""
    x, y, p = node.input[0], node.output[0], node.name or node.output[0]
    consts = {"p": ERF_P, "one": 1.0, "zero": 0.0, **{f"a{i + 1}": a for i, a in enumerate(ERF_A)}}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), f"{p}/{k}") for k, v in consts.items()]
    c = {k: f"{p}/{k}" for k in consts}

    def op(kind: str, ins: list[str], out: str, name: str | None = None) -> Any:
        return helper.make_node(kind, ins, [out], name=name or out)

    n = [op("Abs", [x], f"{p}/abs"), op("Mul", [f"{p}/abs", c["p"]], f"{p}/px"),
         op("Add", [f"{p}/px", c["one"]], f"{p}/den"), op("Div", [c["one"], f"{p}/den"], f"{p}/t")]
    acc = c["a5"]
    for i in (4, 3, 2, 1):  # Horner: a1 + t(a2 + t(a3 + t(a4 + t a5)))
        n += [op("Mul", [acc, f"{p}/t"], f"{p}/h{i}m"), op("Add", [f"{p}/h{i}m", c[f"a{i}"]], f"{p}/h{i}")]
        acc = f"{p}/h{i}"
    n += [op("Mul", [acc, f"{p}/t"], f"{p}/poly"), op("Mul", [f"{p}/abs", f"{p}/abs"], f"{p}/sq"),
          op("Neg", [f"{p}/sq"], f"{p}/negsq"), op("Exp", [f"{p}/negsq"], f"{p}/gauss"),
          op("Mul", [f"{p}/poly", f"{p}/gauss"], f"{p}/tail"), op("Sub", [c["one"], f"{p}/tail"], f"{p}/erf_abs"),
          op("Neg", [f"{p}/erf_abs"], f"{p}/erf_neg"), op("Less", [x, c["zero"]], f"{p}/is_neg"),
          op("Where", [f"{p}/is_neg", f"{p}/erf_neg", f"{p}/erf_abs"], y, name=node.name)]
    return n, inits


def lower_for_simulator(model: Any) -> list[str]:
    """Rewrite ``model`` in place; one warning per rewritten node (empty: nothing to do)."""
    opset = _opset(model)
    nodes = list(model.graph.node)
    if not any(n.op_type in ("ReduceSumSquare", "Erf") and n.domain in ("", "ai.onnx") for n in nodes):
        return []
    out: list[Any] = []
    warnings: list[str] = []
    for node in nodes:
        if node.op_type == "Erf" and node.domain in ("", "ai.onnx") and node.input and node.output:
            made, inits = _erf_nodes(node)
            out.extend(made)
            model.graph.initializer.extend(inits)
            warnings.append(f"Erf {node.name or node.output[0]!r} rewritten to its A&S 7.1.26 polynomial for the HTP "
                            "simulator (the QNN execution provider has no Erf; MNN fuses the exact GELU into its Gelu)")
            continue
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
