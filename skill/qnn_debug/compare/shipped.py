"""Whether the tensor where a run leaves the fp16 range exists in what ships: MNN's converter fuses a decomposed
LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, its FuseLayerNorm pass) into one ``LayerNorm``
op, so its ``x²`` is never a tensor of the converted model; a dump that marks every tensor keeps the decomposed
ops apart and saturates there (an observer effect), while the shipped graph computes the norm inside one op.

Decided from the graph (the overflowing op's normalisation) and the converted ``.mnn`` (its tensor table and its
LayerNorm ops), never from names alone: the tensor is "not shipped" only when the ``.mnn`` lacks it and holds a
LayerNorm op whose output is a tensor of that normalisation."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .localise import OpNode
from .overflow import Overflow

REGION_STEPS = 8  # ops followed from the overflow to the LayerNorm's output


def _region_tensors(o: Overflow, ops: Iterable[OpNode]) -> set[str]:
    readers: dict[str, list[OpNode]] = {}
    for op in ops:
        for name in op.inputs:
            readers.setdefault(name, []).append(op)
    seen, frontier = {o.tensor}, [o.tensor]
    for _ in range(REGION_STEPS):
        nxt = [out for t in frontier for op in readers.get(t, []) for out in op.outputs if out not in seen]
        seen.update(nxt)
        frontier = nxt
    return seen


def shipped_check(o: Overflow, ops: list[OpNode], mnn_model: str | None) -> dict[str, Any] | None:
    """Evidence on the converted model: ``{"mnn_model", "tensor_in_mnn", "fused_into", "layer_norms"}``; None
    without a readable ``.mnn`` or when the overflow is not inside a normalisation."""
    if mnn_model is None or not Path(mnn_model).is_file() or (o.region_tensor is None and not o.centered):
        return None
    try:
        from ..mnn.model_reader import read_mnn_model

        m = read_mnn_model(mnn_model)
    except Exception:  # an unreadable .mnn only loses this note
        return None
    if m.is_qnn_plugin_model:
        return None
    names = set(m.tensor_names)
    norms = [op for op in m.ops if op.type_name == "LayerNorm"]
    region = _region_tensors(o, ops)
    fused = next((op for op in norms if any(m.tensor_names[i] in region for i in op.outputs)), None)
    out: dict[str, Any] = {"mnn_model": mnn_model, "tensor_in_mnn": o.tensor in names, "layer_norms": len(norms)}
    if fused is not None and o.tensor not in names:
        out["fused_into"] = {"op": fused.name, "op_type": fused.type_name,
                             "output": m.tensor_names[fused.outputs[0]] if fused.outputs else None}
    return out


def shipped_words(ev: dict[str, Any], tensor: str) -> str:
    """One sentence for the summary: what the converted model does with the overflowing tensor."""
    fused = ev.get("fused_into")
    if fused:
        return (f" What ships does not hold `{tensor}`: MNN's converter fuses this decomposed LayerNorm "
                f"(FuseLayerNorm) into one LayerNorm op ({fused['op']}, output `{fused['output']}`; "
                f"{ev['layer_norms']} LayerNorm op(s) in {Path(ev['mnn_model']).name}), so the value saturates only "
                f"in a run that marks every tensor (an observer effect); judge the shipped graph by its unmarked "
                f"outputs, and rescale anyway if the model must be safe fused or not (`fix --op`).")
    if ev.get("tensor_in_mnn") is False:
        return f" `{tensor}` is not a tensor of {Path(ev['mnn_model']).name} (the converter removed or fused it)."
    return ""
