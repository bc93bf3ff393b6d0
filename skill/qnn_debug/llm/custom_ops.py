"""llmexport's custom ops in standard ONNX, so ONNX Runtime and the HTP simulator run a real ``llm.onnx``.

``LlmExporter::FusedAttention(query, key, value, attention_mask)`` is what MNN's converter turns into its own
``Attention`` op: query ``[b, seq, heads, head_dim]`` and key/value ``[b, seq, kv_heads, head_dim]`` after the
rotary and q/k norms, an additive float mask ``[1, 1, seq, seq]``, output ``[b, seq, output_dim]``. MNN computes
``softmax(q·kᵀ·scale + mask)·v`` per head, query head ``i`` reading key/value head ``i // (heads / kv_heads)``
(llmexport's ``repeat_kv``), the scale from ``llm_config.json`` ``attn_scale`` (else ``head_dim^-0.5``). In
prefill (no past tokens) the KV cache adds nothing, so that is the whole op. Written here as Transpose / Gather
(GQA heads) / MatMul / Mul / Add / Softmax / MatMul / Transpose / Reshape: the last op keeps the node's name and
output name, the others are named under it (``<node>/scores`` ...), so every tensor name the user knows stays.

``LlmExporter::FakeLinear`` is a linear layer whose weights llmexport left out of the graph (its MNN path);
without them there is nothing to run: a typed error says to re-export with ``--export onnx``. Any other op of a
non-standard domain is refused by name and domain.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import BadInputError

DOMAIN = "LlmExporter"
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")


def custom_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain not in STANDARD_DOMAINS]


def refuse_unknown(model: onnx.ModelProto, path: str) -> None:
    """Typed errors for the custom ops that cannot be given a meaning here."""
    nodes = custom_nodes(model)
    fake = [n for n in nodes if n.domain == DOMAIN and n.op_type == "FakeLinear"]
    if fake:
        names = [next((a.s.decode() for a in n.attribute if a.name == "name"), n.name) for n in fake]
        raise BadInputError(
            f"{path} holds {len(fake)} LlmExporter::FakeLinear op(s) (e.g. {names[0]!r}): linear layers whose weights "
            "llmexport left out of the graph, so the graph cannot run",
            hint="re-export with `llmexport.py --path <hf model> --export onnx` (the weights then go to "
                 "llm.onnx.data), and point the command at that onnx/llm.onnx")
    other = [n for n in nodes if not (n.domain == DOMAIN and n.op_type == "FusedAttention")]
    if other:
        n = other[0]
        kinds = sorted({f"{x.domain}::{x.op_type}" for x in other})
        raise BadInputError(
            f"{path} uses the custom op {n.domain}::{n.op_type} (node {n.name!r}; custom ops here: {', '.join(kinds)}) "
            "which ONNX Runtime and the HTP simulator cannot run and which has no standard-ONNX meaning here",
            hint=f"export the model without {n.op_type} (llmexport: `--export onnx` of a model it writes in standard "
                 "ops), or localise on the MNN side: `qnn-debug diagnose --target host --mnn-model llm.mnn ...`")


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def attention_shapes(model: onnx.ModelProto, seq: int) -> dict[str, tuple[int, int, int]]:
    """FusedAttention node name → (heads, kv_heads, head_dim), by ONNX shape inference at ``seq`` tokens with each
    FusedAttention standing in as a reshape of its query (its real output shape)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i in m.graph.input:
        for d in i.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.Clear()
                d.dim_value = seq
    fused = {n.name for n in m.graph.node if n.domain == DOMAIN and n.op_type == "FusedAttention"}
    outs = {o for n in m.graph.node if n.name in fused for o in n.output}
    kept = [v for v in m.graph.value_info if v.name not in outs]
    del m.graph.value_info[:]
    m.graph.value_info.extend(kept)
    nodes: list[onnx.NodeProto] = []
    for n in m.graph.node:
        if n.name in fused:
            nodes.append(helper.make_node("Constant", [], [f"{n.name}/standin_shape"],
                                          value=numpy_helper.from_array(np.asarray([0, 0, -1], np.int64))))
            nodes.append(helper.make_node("Reshape", [n.input[0], f"{n.name}/standin_shape"], list(n.output), name=n.name))
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    try:
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception as e:
        raise BadInputError(f"cannot infer the attention shapes of the graph: {e}",
                            hint="pass a graph exported by llmexport.py --export onnx") from None
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            for v in [*inferred.graph.value_info, *inferred.graph.input]}
    out: dict[str, tuple[int, int, int]] = {}
    for n in model.graph.node:
        if n.name not in fused:
            continue
        q, k = dims.get(n.input[0]), dims.get(n.input[1])
        if not q or not k or len(q) != 4 or len(k) != 4 or not all(q[2:]) or not k[2]:
            raise BadInputError(f"cannot tell the heads of {n.name!r} (query {q}, key {k}; expected [b, seq, heads, dim])",
                                hint="pass a graph exported by llmexport.py --export onnx")
        heads, head_dim, kv = int(q[2] or 0), int(q[3] or 0), int(k[2] or 0)
        if heads % kv:
            raise BadInputError(f"{n.name!r}: {heads} query heads are not a multiple of {kv} key/value heads",
                                hint="the graph is not a grouped-query attention llmexport writes")
        out[n.name] = (heads, kv, head_dim)
    return out


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(value, name))


def lower_attention(node: onnx.NodeProto, heads: int, kv_heads: int, head_dim: int, scale: float) -> list[onnx.NodeProto]:
    """One FusedAttention as standard ops (opset >= 13), its output name and node name kept on the last op."""
    p = node.name
    q, k, v, mask = node.input[:4]
    out_dim = int(_attr(node, "output_dim", heads * head_dim))
    nodes = [helper.make_node("Transpose", [q], [f"{p}/q_heads"], name=f"{p}/q_heads", perm=[0, 2, 1, 3])]
    if kv_heads != heads:  # GQA: query head i reads key/value head i // group
        group = heads // kv_heads
        idx = f"{p}/kv_index"
        nodes.append(_const(idx, np.arange(heads, dtype=np.int64) // group))
        nodes.append(helper.make_node("Gather", [k, idx], [f"{p}/k_repeated"], name=f"{p}/k_repeated", axis=2))
        nodes.append(helper.make_node("Gather", [v, idx], [f"{p}/v_repeated"], name=f"{p}/v_repeated", axis=2))
        k, v = f"{p}/k_repeated", f"{p}/v_repeated"
    nodes += [
        helper.make_node("Transpose", [k], [f"{p}/k_t"], name=f"{p}/k_t", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", [v], [f"{p}/v_heads"], name=f"{p}/v_heads", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", [f"{p}/q_heads", f"{p}/k_t"], [f"{p}/qk"], name=f"{p}/qk"),
        _const(f"{p}/scale", np.asarray(scale, np.float32)),
        helper.make_node("Mul", [f"{p}/qk", f"{p}/scale"], [f"{p}/scores"], name=f"{p}/scores"),
        helper.make_node("Add", [f"{p}/scores", mask], [f"{p}/masked"], name=f"{p}/masked"),
        helper.make_node("Softmax", [f"{p}/masked"], [f"{p}/probs"], name=f"{p}/probs", axis=-1),
        helper.make_node("MatMul", [f"{p}/probs", f"{p}/v_heads"], [f"{p}/context"], name=f"{p}/context"),
        helper.make_node("Transpose", [f"{p}/context"], [f"{p}/context_t"], name=f"{p}/context_t", perm=[0, 2, 1, 3]),
        _const(f"{p}/out_shape", np.asarray([0, 0, out_dim], np.int64)),
        helper.make_node("Reshape", [f"{p}/context_t", f"{p}/out_shape"], [node.output[0]], name=p),
    ]
    return nodes


def lower_custom_ops(model: onnx.ModelProto, path: str, scale: float | None, seq: int) -> list[str]:
    """Rewrite ``model``'s FusedAttention ops in place (other custom ops refused); one note per kind of rewrite."""
    refuse_unknown(model, path)
    fused = [n for n in model.graph.node if n.domain == DOMAIN and n.op_type == "FusedAttention"]
    if not fused:
        return []
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise BadInputError(f"{path} has opset {opset}; the attention is written with opset-13 ops",
                            hint="re-export with llmexport 0.0.5 or later (opset 15)")
    shapes = attention_shapes(model, seq)
    names = {n.name for n in fused}
    nodes: list[onnx.NodeProto] = []
    for n in model.graph.node:
        if n.domain == DOMAIN and n.name in names:
            h, kv, d = shapes[n.name]
            nodes += lower_attention(n, h, kv, d, scale if scale is not None else 1.0 / math.sqrt(d))
        else:
            nodes.append(n)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    # torch declared the attention outputs 4-D and propagated that rank downstream; they are 3-D: keep the element
    # types and let ONNX Runtime infer the shapes
    for v in [*model.graph.value_info, *model.graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            v.type.tensor_type.ClearField("shape")
    keep_ops = [o for o in model.opset_import if o.domain != DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(keep_ops)
    h, kv, d = shapes[fused[0].name]
    used = scale if scale is not None else 1.0 / math.sqrt(d)
    return [f"{len(fused)} LlmExporter::FusedAttention op(s) written in standard ONNX as MNN computes them "
            f"(softmax(q·kᵀ·{used:.6g} + mask)·v, {h} query heads over {kv} key/value heads of {d}); each keeps its "
            "node and output name, its inner tensors are named under it"]
