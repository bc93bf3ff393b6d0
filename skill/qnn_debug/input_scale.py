"""The value range a model's float inputs expect, read from the graph's own first operation on them.

Generated inputs are in [0, 1]. A model that starts with ``x / 255`` (or ``x * 0.0039``, or ``x - 123.7``) is fed
raw pixels by its application, so its activations, and any fp16 overflow they cause, are up to 255 times larger
than [0, 1] data would show: the tool would call a broken run healthy. Where the graph says so, generated data
is scaled to 0..255; where it does not, the note says that range-dependent faults need the application's inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    import numpy as np
    import onnx

PIXEL_MAX = 255.0


class InputScale(BaseModel):
    """Why one input is taken to carry raw pixels (0..255) rather than [0, 1] data."""

    input: str
    scale: float  # generated [0, 1] data is multiplied by this
    node: str  # the node that shows it
    reason: str  # e.g. "divides it by 255"


def pixel_scales(model: onnx.ModelProto) -> dict[str, InputScale]:
    """Inputs whose first operation normalises raw pixels: Div by ≥ 127, Mul by ≤ 1/127, Sub of a mean ≥ 50."""
    from .onnx_graph import graph_inputs

    constants = _constants(model)
    found: dict[str, InputScale] = {}
    for spec in graph_inputs(model):
        if not spec.dtype.startswith("float"):
            continue
        for node in model.graph.node:
            if len(node.input) != 2 or spec.name not in node.input:
                continue
            other = node.input[1] if node.input[0] == spec.name else node.input[0]
            value = constants.get(other)
            reason = _pixel_reason(node.op_type, value, operand_first=node.input[0] == spec.name)
            if reason:
                found[spec.name] = InputScale(input=spec.name, scale=PIXEL_MAX, node=node.name or node.op_type,
                                              reason=reason)
                break
    return found


def generated_note(names: list[str], scales: dict[str, InputScale], float_inputs: list[str]) -> str | None:
    """One sentence for a report: what generated inputs stand for, and what they cannot show."""
    parts = [f"{s.input!r} scaled to 0..255 because {s.node} {s.reason}" for n in names if (s := scales.get(n))]
    plain = [n for n in float_inputs if n not in scales]
    if plain:
        parts.append(f"{', '.join(repr(n) for n in plain)} generated in [0, 1]: an fp16 range fault that needs the "
                     "application's value range (raw pixels, unnormalised features) shows only with --inputs FILE.npz "
                     "holding what the application feeds")
    return "; ".join(parts) if parts else None


def _pixel_reason(op: str, value: np.ndarray | None, *, operand_first: bool) -> str | None:
    import numpy as np

    if value is None or value.size == 0 or value.dtype.kind != "f":
        return None
    magnitude = float(np.mean(np.abs(value)))
    if op == "Div" and operand_first and magnitude >= 127:
        return f"divides it by {magnitude:g}"
    if op == "Mul" and 0 < magnitude <= 1 / 127:
        return f"multiplies it by {magnitude:.3g}"
    if op == "Sub" and operand_first and magnitude >= 50:
        return f"subtracts a mean of {magnitude:g}"
    return None


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small constants (initializers and Constant nodes) by name; big weights are skipped, never loaded."""
    from onnx import numpy_helper

    out: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
        if init.data_location != 1 and _count(init.dims) <= 64:
            out[init.name] = numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and _count(attr.t.dims) <= 64:
                    out[node.output[0]] = numpy_helper.to_array(attr.t)
    return out


def _count(dims: object) -> int:
    n = 1
    for d in dims:  # type: ignore[attr-defined]
        n *= int(d)
    return n
