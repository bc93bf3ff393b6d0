"""Edits of MNN's converter JSON (``-f MNN --JsonFile`` output) that llmexport's own export makes.

llmexport converts ONNX with ``--allowCustomOp``: its custom ops (``FusedAttention``, ``FusedRoPE``) arrive
as ``Extra`` ops, which it then rewrites in the JSON into MNN ops (``Attention`` with an
``AttentionParam``, ``RoPE`` with a ``RoPEParam`` holding the q/k-norm gains) and converts back with
``-f JSON``. Activation quantization is attached the same way, as ``extraTensorDescribe`` entries with a
``quantInfo``. Doing our edits in this JSON, never in the flatbuffer bytes, means the converter itself
validates and writes every file.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class QuantEncoding(BaseModel):
    """One activation encoding as MNN stores it (``TensorQuantInfo``): float = (q - zero) * scale."""

    scale: float
    zero: float = 0.0
    min: float = -32767
    max: float = 32767
    type: str = "DT_INT16"


def _attrs(op: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in op.get("main", {}).get("attr", []):
        key = a.get("key")
        if key is not None:
            out[key] = a.get("s", a.get("i", a.get("f")))
            if "f" in a and a.get("f") and not a.get("i"):
                out[key] = a["f"]
    return out


def _const_floats(net: dict[str, Any], tensor: int) -> list[float] | None:
    for op in net["oplists"]:
        if tensor in op.get("outputIndexes", []):
            main = op.get("main", {})
            return list(main["float32s"]) if op.get("type") == "Const" and "float32s" in main else None
    return None


def rewrite_custom_ops(net: dict[str, Any]) -> dict[str, int]:
    """``Extra`` FusedAttention → ``Attention``; ``Extra`` FusedRoPE → ``RoPE`` (in place). Returns counts."""
    counts = {"Attention": 0, "RoPE": 0}
    for op in net["oplists"]:
        if op.get("type") != "Extra":
            continue
        kind = op.get("main", {}).get("type")
        attrs = _attrs(op)
        if kind == "FusedAttention":
            op.update(type="Attention", main_type="AttentionParam", name=attrs.get("name", op.get("name", "")),
                      main={"kv_cache": bool(attrs.get("kv_cache", 1)), "layer_index": int(attrs.get("layer_index", -1)),
                            "kv_shared_layer_index": int(attrs.get("kv_shared_layer_index", -1))},
                      defaultDimentionFormat="NHWC")
            counts["Attention"] += 1
        elif kind == "FusedRoPE":
            ins = op["inputIndexes"]
            param: dict[str, Any] = {k: int(attrs.get(k, 0)) for k in ("rope_cut_head_dim", "num_head", "kv_num_head", "head_dim")}
            for which, slot in (("q_norm", 4), ("k_norm", 5)):
                if int(attrs.get(which, 0)) and len(ins) > slot:
                    gamma = _const_floats(net, ins[slot])
                    if gamma is None:
                        raise ValueError(f"FusedRoPE {op.get('name')}: {which} gain is not a constant")
                    param[which] = {"axis": [-1], "epsilon": float(attrs.get(f"{which}_eps", 1e-6)), "gamma": gamma,
                                    "useRMSNorm": True}
            op.update(type="RoPE", main_type="RoPEParam", main=param, inputIndexes=ins[:4],
                      name=attrs.get("name", op.get("name", "")))
            counts["RoPE"] += 1
    return counts


def tensor_index(net: dict[str, Any], name: str) -> int | None:
    names: list[str] = net["tensorName"]
    return names.index(name) if name in names else None


def set_quant(net: dict[str, Any], encodings: dict[int, QuantEncoding]) -> int:
    """Attach (or replace) ``quantInfo`` on tensors by index, as the smooth/omni quantizers write them."""
    existing = {d["index"]: d for d in net.setdefault("extraTensorDescribe", []) if "index" in d}
    for idx, enc in encodings.items():
        entry = existing.get(idx)
        if entry is None:
            entry = {"index": idx}
            net["extraTensorDescribe"].append(entry)
            existing[idx] = entry
        entry["quantInfo"] = enc.model_dump()
    return len(encodings)


class OpRef(BaseModel):
    """An op of the JSON net, for choosing where to attach encodings."""

    position: int
    name: str
    type: str
    binary_op: int | None = None
    inputs: list[int] = Field(default_factory=list)
    outputs: list[int] = Field(default_factory=list)


def ops(net: dict[str, Any]) -> list[OpRef]:
    out = []
    for i, op in enumerate(net["oplists"]):
        main = op.get("main") or {}
        out.append(OpRef(position=i, name=op.get("name", ""), type=op.get("type", ""),
                         binary_op=_binary_code(main.get("opType")) if op.get("type") == "BinaryOp" else None,
                         inputs=list(op.get("inputIndexes", [])), outputs=list(op.get("outputIndexes", []))))
    return out


_BINARY_NAMES = {"ADD": 0, "SUB": 1, "MUL": 2, "DIV": 3}


def _binary_code(value: Any) -> int | None:
    if value is None:
        return 0  # schema default ADD
    if isinstance(value, int):
        return value
    return _BINARY_NAMES.get(str(value))


# --- activation quantization the way the smooth/omni exporters attach it ---------------------------------

# Reshape is kept: the converter turns each projection into Convolution + Reshape, and the propagation pass
# of the real quantizer carries encodings through Reshape anyway.
SKIP_QUANT_TYPES = frozenset({"Input", "Const", "Extra", "ConvertTensor", "Attention", "RoPE"})


def layer_of(name: str) -> int | None:
    """Decoder layer index from an op name (``/layers.3/mlp/Mul`` → 3), as the quantizers match it."""
    import re

    m = re.search(r"(?:blocks|layers)\.(\d+)", name)
    return int(m.group(1)) if m else None


def asym16(lo: float, hi: float) -> QuantEncoding:
    """Asymmetric 16-bit encoding of [lo, hi]: float = (q - zero) * scale, q in [-32767, 32767]."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-8) / 65534.0
    return QuantEncoding(scale=scale, zero=float(round(-32767 - lo / scale)))


def smooth_like(net: dict[str, Any], ranges: dict[str, tuple[float, float]]) -> dict[int, QuantEncoding]:
    """Encodings on input 0 / output 0 of every op in a ``layers.N`` scope (not lm_head), from calibration
    ranges by tensor name; tensors without a range (integer ones, fused-away ones) get none."""
    names: list[str] = net["tensorName"]
    out: dict[int, QuantEncoding] = {}
    for op in ops(net):
        if op.type in SKIP_QUANT_TYPES or "lm_head" in op.name or layer_of(op.name) is None:
            continue
        for idx in (op.inputs[:1] + op.outputs[:1]):
            if 0 <= idx < len(names) and names[idx] in ranges and idx not in out:
                out[idx] = asym16(*ranges[names[idx]])
    return out


def integer_index_tensors(net: dict[str, Any]) -> list[int]:
    """``position_ids``, ``logits_index``, a VL encoder's ``idx_tensor`` and every Gather's index input: tensors
    that must stay integer (the propagation reaches graph inputs through the index arithmetic MNN inserts)."""
    names: list[str] = net["tensorName"]
    found = [names.index(n) for n in ("position_ids", "logits_index", "idx_tensor") if n in names]
    for op in ops(net):
        if op.type in ("GatherV2", "Gather") and len(op.inputs) > 1 and op.inputs[1] not in found:
            found.append(op.inputs[1])
    return found
