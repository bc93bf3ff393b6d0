"""The ONNX graph of a tiny Qwen3-shaped decoder, written the way llmexport's torch export writes it.

Why this shape: the faults people hit on the NPU path live in the exact node pattern torch emits —
RMSNorm as ``Mul(x, Div(1, Sqrt(ReduceMean(Pow(x, 2)) + eps)))`` then ``Mul(weight, ·)``, q/k norms
before rotary, rotary cos/sin fetched with a ``Gather`` on ``position_ids``, GQA, SwiGLU as
``Mul(gate * Sigmoid(gate), up)``. Input/output names are llmexport's: ``input_ids`` carries the
*embeddings* ``[seq, 1, hidden]`` (the runtime embeds tokens itself), ``attention_mask``
``[1, 1, seq, seq]`` float, ``position_ids`` ``[1, seq]`` int32, ``logits_index`` ``[1]`` int32; outputs
``logits`` and ``hidden_states``. Node names follow torch's ``/layers.N/<module>/<Op>`` scheme so
name-based tools (smooth-quant's ``layers.N`` match, block cutting) see what they see on real exports.

Two attention forms: ``onnx`` (MatMul/Softmax, runs on ONNX Runtime and the HTP simulator) and ``fused``
(the ``LlmExporter::FusedAttention`` custom op llmexport emits; MNN's converter keeps it as an ``Extra``
op that the export rewrites into MNN's KV-cache ``Attention``). ``fused_rope_layers`` emits
``LlmExporter::FusedRoPE`` (the C4 export form) for those layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from pydantic import BaseModel, Field

OPSET = 17
CUSTOM_DOMAIN = "LlmExporter"


class TinyQwen3Config(BaseModel):
    """Sizes of the tiny decoder (defaults: 2 layers, hidden 128, 4 query / 2 KV heads, vocab 320)."""

    layers: int = Field(default=2, ge=1, le=64)
    hidden: int = Field(default=128, ge=16, le=256)
    heads: int = Field(default=4, ge=1)
    kv_heads: int = Field(default=2, ge=1)
    intermediate: int = Field(default=256, ge=16, le=1024)
    vocab: int = Field(default=320, ge=260, le=512)
    max_position: int = Field(default=512, ge=16, le=4096)
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class DecoderSizes(Protocol):
    """What :func:`build_graph` reads of a config: the tiny one, or real sizes (``qnn_debug_testkit.sized``)."""

    @property
    def layers(self) -> int: ...
    @property
    def hidden(self) -> int: ...
    @property
    def heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def vocab(self) -> int: ...
    @property
    def max_position(self) -> int: ...
    @property
    def rope_theta(self) -> float: ...
    @property
    def rms_eps(self) -> float: ...


class VLText(BaseModel):
    """What a Qwen3-VL decoder adds to the Qwen3 one (MNN's ``Rotary.mrope_forward`` and ``qwen3_vl_forward``).

    ``position_ids`` is ``[3, seq]`` (temporal, height, width rows); the half-dim rotary frequencies are taken
    from the three rows by ``mrope_section``: interleaved across the frequency index (Qwen3-VL: frequency j
    comes from row H when ``j % 3 == 1`` and ``j < 3 * section[1]``, from row W when ``j % 3 == 2`` and
    ``j < 3 * section[2]``, else from T) or in contiguous chunks (Qwen2-VL: the first ``section[0]``
    frequencies from T, the next ``section[1]`` from H, the rest from W). ``deepstack_embeds`` ``[k, seq or 1,
    hidden]`` is added to the hidden state after each of the first ``k`` layers."""

    mrope_section: tuple[int, int, int]
    interleaved: bool = True
    chunked_layers: list[int] = Field(default_factory=list, description="layers whose rotary uses the chunked layout")
    deepstack: int = Field(default=3, ge=0)
    deepstack_dropped_layers: list[int] = Field(default_factory=list, description="layers that skip their deepstack add")
    deepstack_seq: int | str = Field(default="seq", description="declared length of deepstack_embeds' token axis "
                                     "('seq' = the graph's sequence axis; llmexport's trace declares 1)")


def mrope_index(section: tuple[int, int, int], interleaved: bool) -> np.ndarray:
    """Column of ``[seq, 3 * half]`` (rows T, H, W side by side) that each rotary frequency is read from."""
    half = sum(section)
    axis = np.zeros(half, np.int64)
    j = np.arange(half)
    if interleaved:
        axis[(j % 3 == 1) & (j < 3 * section[1])] = 1
        axis[(j % 3 == 2) & (j < 3 * section[2])] = 2
    else:
        axis[section[0]:section[0] + section[1]] = 1
        axis[section[0] + section[1]:] = 2
    return axis * half + j


class GraphFaults(BaseModel):
    """Numeric faults written into the graph itself (the quant/op faults are added after conversion)."""

    wrong_rotary_layer: int | None = Field(default=None, description="layer whose rotate_half lacks the Neg")
    residual_spike_layer: int | None = Field(default=None, description="layer whose MLP output gets huge channels on token 0")
    residual_spike_value: float = 400.0  # fine in fp32 and fp16, but its square (1.6e5) overflows fp16 in the next RMSNorm
    fused_rope_layers: list[int] = Field(default_factory=list, description="layers exported as FusedRoPE")


def make_weights(cfg: TinyQwen3Config) -> dict[str, np.ndarray]:
    """Deterministic weights with realistic scales (norm gains near 1, projections ~1/sqrt(fan_in))."""
    rng = np.random.default_rng(cfg.seed)
    h, hd, inter = cfg.hidden, cfg.head_dim, cfg.intermediate

    def lin(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    embed = (rng.standard_normal((cfg.vocab, h)) * 0.5).astype(np.float32)
    # bf16-exact, so the runtime's bf16 embedding file holds exactly these values
    w: dict[str, np.ndarray] = {"embed": (embed.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)}
    for i in range(cfg.layers):
        p = f"layers.{i}"
        w[f"{p}.input_layernorm"] = gain(h)
        w[f"{p}.q_proj"] = lin(cfg.heads * hd, h)
        w[f"{p}.k_proj"] = lin(cfg.kv_heads * hd, h)
        w[f"{p}.v_proj"] = lin(cfg.kv_heads * hd, h)
        w[f"{p}.o_proj"] = lin(h, cfg.heads * hd)
        w[f"{p}.q_norm"] = gain(hd)
        w[f"{p}.k_norm"] = gain(hd)
        w[f"{p}.post_attention_layernorm"] = gain(h)
        w[f"{p}.gate_proj"] = lin(inter, h)
        w[f"{p}.up_proj"] = lin(inter, h)
        w[f"{p}.down_proj"] = lin(h, inter)
    w["norm"] = gain(h)
    # peaked logits favouring printable ASCII tokens: greedy text is stable and looks like text, not noise
    printable = np.asarray([1.0 if 32 <= t < 127 or 259 <= t < 284 else 0.25 for t in range(cfg.vocab)], np.float32)
    w["lm_head"] = (lin(cfg.vocab, h) * 4.0 * printable[:, None]).astype(np.float32)
    return w


def rope_tables(cfg: DecoderSizes) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin ``[max_position, head_dim]`` (half-dim frequencies repeated twice, Llama layout)."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.arange(cfg.max_position, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class _Builder:
    """Adds nodes with torch-style names (``/layers.0/self_attn/q_proj/MatMul``) and output names."""

    def __init__(self, init_hook: Callable[[str, np.ndarray], onnx.TensorProto] | None = None) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._used: dict[str, int] = {}
        self._hook = init_hook

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(self._hook(name, arr) if self._hook is not None else numpy_helper.from_array(arr, name))
        return name

    def const_i64(self, name: str, values: list[int]) -> str:
        return self.init(name, np.asarray(values, dtype=np.int64))

    def op(self, scope: str, op_type: str, inputs: list[str], *, domain: str = "", outputs: int = 1, **attrs: Any) -> list[str]:
        base = f"{scope}/{op_type}"
        k = self._used.get(base, 0)
        self._used[base] = k + 1
        name = base if k == 0 else f"{base}_{k}"
        outs = [f"{name}_output_{j}" for j in range(outputs)]
        node = helper.make_node(op_type, inputs, outs, name=name, domain=domain)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())  # custom ops have a "name" attribute
        self.nodes.append(node)
        return outs

    def one(self, scope: str, op_type: str, inputs: list[str], **attrs: Any) -> str:
        return self.op(scope, op_type, inputs, **attrs)[0]


def _mrope(b: _Builder, scope: str, half: int, index: np.ndarray) -> tuple[str, str]:
    """cos/sin ``[1, seq, 1, 2*half]`` for ``position_ids`` ``[3, seq]``, as MNN's ``mrope_forward`` writes them:
    one Gather per table ([3, seq, half]), rows side by side ([seq, 3*half]), one Gather picking each frequency's row."""
    idx = b.const_i64(f"{scope}/mrope_index", [int(v) for v in index])
    axes = b.const_i64(f"{scope}/axes", [0, 2])
    out = []
    for table in ("cos", "sin"):
        t = b.one(scope, "Gather", [f"rotary.{table}_table", "position_ids"], axis=0)
        t = b.one(scope, "Transpose", [t], perm=[1, 0, 2])
        t = b.one(scope, "Reshape", [t, b.const_i64(f"{scope}/{table}_rows", [0, 3 * half])])
        t = b.one(scope, "Gather", [t, idx], axis=1)
        t = b.one(scope, "Concat", [t, t], axis=-1)
        out.append(b.one(scope, "Unsqueeze", [t, axes]))
    return out[0], out[1]


def _rms_norm(b: _Builder, scope: str, x: str, weight: str, eps: str) -> str:
    """torch's export of ``weight * (x * rsqrt(mean(x^2) + eps))``: Pow, ReduceMean, Add, Sqrt, Div, Mul, Mul."""
    sq = b.one(scope, "Pow", [x, "const_two"])
    mean = b.one(scope, "ReduceMean", [sq], axes=[-1], keepdims=1)
    var = b.one(scope, "Add", [mean, eps])
    root = b.one(scope, "Sqrt", [var])
    inv = b.one(scope, "Div", ["const_one", root])
    normed = b.one(scope, "Mul", [x, inv])
    return b.one(scope, "Mul", [weight, normed])


def _linear(b: _Builder, scope: str, x: str, w: np.ndarray, name: str) -> str:
    return b.one(scope, "MatMul", [x, b.init(f"{name}.weight", np.ascontiguousarray(w.T))])


def _rotate_half(b: _Builder, scope: str, x: str, hd: int, wrong: bool) -> str:
    # torch.onnx writes 5-input Slices (data, starts, ends, axes, steps); MNN's QNN StridedSlice refuses 4 inputs
    x1 = b.one(scope, "Slice", [x, b.const_i64(f"{scope}/s0", [0]), b.const_i64(f"{scope}/e0", [hd // 2]),
                                b.const_i64(f"{scope}/a0", [-1]), b.const_i64(f"{scope}/st0", [1])])
    x2 = b.one(scope, "Slice", [x, b.const_i64(f"{scope}/s1", [hd // 2]), b.const_i64(f"{scope}/e1", [hd]),
                                b.const_i64(f"{scope}/a1", [-1]), b.const_i64(f"{scope}/st1", [1])])
    neg = x2 if wrong else b.one(scope, "Neg", [x2])
    return b.one(scope, "Concat", [neg, x1], axis=-1)


def _rotary(b: _Builder, scope: str, x: str, cos: str, sin: str, hd: int, wrong: bool) -> str:
    xc = b.one(scope, "Mul", [x, cos])
    xs = b.one(scope, "Mul", [_rotate_half(b, scope, x, hd, wrong), sin])
    return b.one(scope, "Add", [xc, xs])


def _repeat_kv(b: _Builder, scope: str, x: str, cfg: DecoderSizes, final: list[int]) -> str:
    """GQA head repeat as torch exports ``repeat_kv``: Unsqueeze, Expand, Reshape."""
    rep = cfg.heads // cfg.kv_heads
    if rep == 1:
        return x
    u = b.one(scope, "Unsqueeze", [x, b.const_i64(f"{scope}/unsq_axes", [2])])
    e = b.one(scope, "Expand", [u, b.const_i64(f"{scope}/expand_shape", [1, 1, rep, 1, 1])])
    return b.one(scope, "Reshape", [e, b.const_i64(f"{scope}/rep_shape", final)])


def _attention(b: _Builder, scope: str, q: str, k: str, v: str, mask: str, cfg: DecoderSizes,
               attention: str, layer: int) -> str:
    hd = cfg.head_dim
    if attention == "fused":
        return b.op(scope, "FusedAttention", [q, k, v, mask], domain=CUSTOM_DOMAIN,
                    output_dim=cfg.heads * hd, kv_cache=1, name=f"/layers.{layer}/self_attn/FusedAttention",
                    layer_index=layer, kv_shared_layer_index=-1, head_dim=hd)[0]
    qt = b.one(scope, "Transpose", [q], perm=[0, 2, 1, 3])
    kt = _repeat_kv(b, f"{scope}/repeat_k", b.one(scope, "Transpose", [k], perm=[0, 2, 3, 1]), cfg, [1, cfg.heads, hd, -1])
    vt = _repeat_kv(b, f"{scope}/repeat_v", b.one(scope, "Transpose", [v], perm=[0, 2, 1, 3]), cfg, [1, cfg.heads, -1, hd])
    scores = b.one(scope, "MatMul", [qt, kt])
    scaled = b.one(scope, "Mul", [scores, b.init(f"{scope}/scale", np.asarray(1.0 / np.sqrt(hd), np.float32))])
    masked = b.one(scope, "Add", [scaled, mask])
    probs = b.one(scope, "Softmax", [masked], axis=-1)
    ctx = b.one(scope, "MatMul", [probs, vt])
    back = b.one(scope, "Transpose", [ctx], perm=[0, 2, 1, 3])
    return b.one(scope, "Reshape", [back, b.const_i64(f"{scope}/out_shape", [1, -1, cfg.heads * hd])])


def build_graph(cfg: DecoderSizes, weights: Mapping[str, np.ndarray], *, attention: Literal["onnx", "fused"] = "onnx",
                seq_len: int | None = None, faults: GraphFaults | None = None,
                init_hook: Callable[[str, np.ndarray], onnx.TensorProto] | None = None,
                vl: VLText | None = None) -> onnx.ModelProto:
    """The decoder as an ONNX model; ``seq_len`` None keeps llmexport's dynamic ``seq_len`` axes.
    ``vl`` makes it Qwen3-VL's: ``position_ids`` ``[3, seq]`` (M-RoPE) and a ``deepstack_embeds`` input.

    ``weights`` may make each tensor on demand and ``init_hook`` (name, array → initializer) may write its
    bytes elsewhere (external data): then no more than one weight is in memory at a time."""
    faults = faults or GraphFaults()
    hd, h = cfg.head_dim, cfg.hidden
    if cfg.heads % cfg.kv_heads or (isinstance(cfg, TinyQwen3Config) and h % cfg.heads):
        raise ValueError("heads must divide hidden and kv_heads must divide heads")
    b = _Builder(init_hook)
    b.init("const_two", np.asarray(2.0, np.float32))
    b.init("const_one", np.asarray(1.0, np.float32))
    eps = b.init("const_eps", np.asarray(cfg.rms_eps, np.float32))
    cos_t, sin_t = rope_tables(cfg)

    x = b.one("", "Transpose", ["input_ids"], perm=[1, 0, 2])  # [seq,1,h] → [1,seq,h]
    chunked: tuple[str, str] | None = None
    if vl is None:
        b.init("rotary.cos_table", cos_t)
        b.init("rotary.sin_table", sin_t)
        pos = b.one("/rotary", "Reshape", ["position_ids", b.const_i64("/rotary/flat", [-1])])
        cos = b.one("/rotary", "Gather", ["rotary.cos_table", pos], axis=0)
        sin = b.one("/rotary", "Gather", ["rotary.sin_table", pos], axis=0)
        axes12 = b.const_i64("/rotary/axes", [0, 2])
        cos = b.one("/rotary", "Unsqueeze", [cos, axes12])  # [1, seq, 1, hd]
        sin = b.one("/rotary", "Unsqueeze", [sin, axes12])
    else:
        half = hd // 2
        if sum(vl.mrope_section) != half:
            raise ValueError(f"mrope_section {vl.mrope_section} must sum to head_dim/2 = {half}")
        b.init("rotary.cos_table", np.ascontiguousarray(cos_t[:, :half]))
        b.init("rotary.sin_table", np.ascontiguousarray(sin_t[:, :half]))
        cos, sin = _mrope(b, "/rotary", half, mrope_index(vl.mrope_section, vl.interleaved))
        if vl.chunked_layers:
            chunked = _mrope(b, "/rotary_chunked", half, mrope_index(vl.mrope_section, False))
    hidden = x
    layer_rotary = (cos, sin)
    for i in range(cfg.layers):
        L = f"/layers.{i}"
        p = f"layers.{i}"
        normed = _rms_norm(b, f"{L}/input_layernorm", hidden, b.init(f"{p}.input_layernorm.weight", weights[f"{p}.input_layernorm"]), eps)
        sa = f"{L}/self_attn"
        q = _linear(b, f"{sa}/q_proj", normed, weights[f"{p}.q_proj"], f"{p}.self_attn.q_proj")
        k = _linear(b, f"{sa}/k_proj", normed, weights[f"{p}.k_proj"], f"{p}.self_attn.k_proj")
        v = _linear(b, f"{sa}/v_proj", normed, weights[f"{p}.v_proj"], f"{p}.self_attn.v_proj")
        q = b.one(sa, "Reshape", [q, b.const_i64(f"{sa}/q_shape", [1, -1, cfg.heads, hd])])
        k = b.one(sa, "Reshape", [k, b.const_i64(f"{sa}/k_shape", [1, -1, cfg.kv_heads, hd])])
        v = b.one(sa, "Reshape", [v, b.const_i64(f"{sa}/v_shape", [1, -1, cfg.kv_heads, hd])])
        qn_w = b.init(f"{p}.self_attn.q_norm.weight", weights[f"{p}.q_norm"])
        kn_w = b.init(f"{p}.self_attn.k_norm.weight", weights[f"{p}.k_norm"])
        cos, sin = chunked if chunked is not None and vl is not None and i in vl.chunked_layers else layer_rotary
        if i in faults.fused_rope_layers:
            q, k = b.op(f"{sa}", "FusedRoPE", [q, k, cos, sin, qn_w, kn_w], domain=CUSTOM_DOMAIN, outputs=2,
                        rope_cut_head_dim=hd, num_head=cfg.heads, kv_num_head=cfg.kv_heads, head_dim=hd,
                        q_norm_eps=cfg.rms_eps, k_norm_eps=cfg.rms_eps, q_norm=1, k_norm=1,
                        name=f"{sa}/FusedRoPE")
        else:
            q = _rms_norm(b, f"{sa}/q_norm", q, qn_w, eps)
            k = _rms_norm(b, f"{sa}/k_norm", k, kn_w, eps)
            wrong = faults.wrong_rotary_layer == i
            q = _rotary(b, f"{sa}/rotary_q", q, cos, sin, hd, wrong)
            k = _rotary(b, f"{sa}/rotary_k", k, cos, sin, hd, wrong)
        attn = _attention(b, sa, q, k, v, "attention_mask", cfg, attention, i)
        o = _linear(b, f"{sa}/o_proj", attn, weights[f"{p}.o_proj"], f"{p}.self_attn.o_proj")
        hidden = b.one(L, "Add", [hidden, o])
        normed2 = _rms_norm(b, f"{L}/post_attention_layernorm", hidden,
                            b.init(f"{p}.post_attention_layernorm.weight", weights[f"{p}.post_attention_layernorm"]), eps)
        mlp = f"{L}/mlp"
        gate = _linear(b, f"{mlp}/gate_proj", normed2, weights[f"{p}.gate_proj"], f"{p}.mlp.gate_proj")
        up = _linear(b, f"{mlp}/up_proj", normed2, weights[f"{p}.up_proj"], f"{p}.mlp.up_proj")
        sig = b.one(f"{mlp}/act_fn", "Sigmoid", [gate])
        act = b.one(f"{mlp}/act_fn", "Mul", [gate, sig])
        prod = b.one(mlp, "Mul", [act, up])
        down = _linear(b, f"{mlp}/down_proj", prod, weights[f"{p}.down_proj"], f"{p}.mlp.down_proj")
        if faults.residual_spike_layer == i and vl is None:
            spike = np.zeros(h, np.float32)
            spike[[3, h // 2 + 1]] = faults.residual_spike_value
            # only on the first position, like the "massive activations" real LLMs carry on their first token
            first = b.one(mlp, "Equal", ["position_ids", b.init(f"{p}.mlp.pos0", np.asarray(0, np.int32))])
            first = b.one(mlp, "Cast", [first], to=TensorProto.FLOAT)
            first = b.one(mlp, "Unsqueeze", [first, b.const_i64(f"{mlp}/spike_axes", [2])])
            down = b.one(mlp, "Add", [down, b.one(mlp, "Mul", [first, b.init(f"{p}.mlp.spike", spike)])])
        hidden = b.one(L, "Add", [hidden, down])
        if vl is not None and i < vl.deepstack and i not in vl.deepstack_dropped_layers:
            ds = b.one(f"{L}/deepstack", "Gather", ["deepstack_embeds", b.init(f"{L}/deepstack/index", np.asarray(i, np.int64))], axis=0)
            hidden = b.one(f"{L}/deepstack", "Add", [hidden, ds])

    start = b.one("", "Cast", ["logits_index"], to=TensorProto.INT64)
    last = b.one("", "Slice", [hidden, start, b.const_i64("/slice_end", [2**62]), b.const_i64("/slice_axes", [1]),
                               b.const_i64("/slice_steps", [1])])
    final = _rms_norm(b, "/norm", last, b.init("norm.weight", weights["norm"]), eps)
    b.nodes.append(helper.make_node("Identity", [final], ["hidden_states"], name="/hidden_states/Identity"))
    b.nodes.append(helper.make_node("MatMul", [final, b.init("lm_head.weight", np.ascontiguousarray(weights["lm_head"].T))],
                                    ["logits"], name="/lm/lm_head/MatMul"))
    seq: int | str = seq_len if seq_len is not None else "seq_len"
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, [seq, 1, h]),
        helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, 1, seq, seq]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT32, [1 if vl is None else 3, seq]),
        helper.make_tensor_value_info("logits_index", TensorProto.INT32, [1]),
    ]
    if vl is not None:
        ds_seq = seq if vl.deepstack_seq == "seq" else vl.deepstack_seq
        inputs.append(helper.make_tensor_value_info("deepstack_embeds", TensorProto.FLOAT, [vl.deepstack, ds_seq, h]))
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, None, cfg.vocab]),
        helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, None, h]),
    ]
    graph = helper.make_graph(b.nodes, "tiny_qwen3", inputs, outputs, b.inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if attention == "fused" or faults.fused_rope_layers:
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="qnn-debug")
    model.ir_version = 9
    if attention == "onnx" and not faults.fused_rope_layers and init_hook is None:
        onnx.checker.check_model(model)
    return model


def prefill_inputs(cfg: TinyQwen3Config, weights: dict[str, np.ndarray], token_ids: list[int]) -> dict[str, np.ndarray]:
    """The four llmexport inputs for a prefill of ``token_ids`` (embedding done here, like the runtime)."""
    ids = np.asarray(token_ids, dtype=np.int64)
    n = len(ids)
    mask = np.triu(np.full((n, n), np.finfo(np.float32).min, np.float32), k=1)[None, None]
    return {
        "input_ids": weights["embed"][ids][:, None, :].astype(np.float32),
        "attention_mask": mask.astype(np.float32),
        "position_ids": np.arange(n, dtype=np.int32)[None, :],
        "logits_index": np.asarray([-1], dtype=np.int32),
    }
