"""Small Qwen3-VL-shaped graphs (onnx.helper) for the VL rotary trials and VL block localisation.

The vision encoder and the M-RoPE decoder written the way MNN's export writes them (input and output names,
node names ``/rotary/...``, ``/pos_embed/...``, ``/blocks.N/...``, ``/deepstack_merger_list.K/...``, ``/merger/...``;
``/layers.N/...`` and the top-level deepstack ``/Add_N`` in the decoder), small enough to run in seconds:

- vision: ``patches`` [seq, 6·p²] → Linear patch embed + bilinear position embedding (``Gather(pos_embed,
  idx_tensor) · weight_tensor``, summed over the 4 corners); 2-D rotary from ``position_ids`` [2, seq]
  (``θ`` over rotary_dim = head_dim/2, rows h then w, ``cat(emb, emb)``: MNN's ``VisionRotary``); pre-norm blocks
  with rotate-half rotary and ``attention_mask`` [1, seq, seq]; a deepstack merger after the blocks in
  ``deepstack`` and the patch merger after the last (2x2 windows → one token);
- decoder: ``input_ids`` (embeddings [T, 1, hidden]), ``attention_mask`` [1, 1, T, T], ``position_ids`` [3, T],
  ``deepstack_embeds`` [n, T, hidden]; M-RoPE tables interleaved as Qwen3-VL lays them out (MNN's
  ``mrope_reindex`` Gather), RMSNorm/GQA-free attention/SwiGLU layers, ``hidden += deepstack_embeds[i]`` after
  layer i < n, final norm and lm_head.

Faults (in the copy the target runs): ``rows_swapped`` (the vision rotary reads position rows w, h),
``mask_not_copied`` (every vision block adds zeros where the mask should be: the buffer the NPU read was never
filled), ``chunked_mrope`` (the decoder's M-RoPE sections laid out in contiguous chunks, Qwen2-VL style),
``deepstack_dropped`` (the add after layer 0 is gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class VisionSizes:
    hidden: int = 64
    heads: int = 2
    blocks: int = 2
    patch: int = 2  # patch side p: patches hold 3 x 2 x p x p values
    side: int = 4  # position-embedding grid side
    seq: int = 32  # two 4x4 images
    out: int = 64  # merger output (the decoder's hidden size)
    deepstack: tuple[int, ...] = (0,)
    block_tables: bool = False  # each block builds its own rotary tables from position_ids (rows picked by a Gather)


@dataclass(frozen=True)
class DecoderSizes:
    hidden: int = 64
    heads: int = 2
    layers: int = 2
    tokens: int = 16
    vocab: int = 96
    deepstack: int = 2
    sections: tuple[int, int, int] = (6, 5, 5)  # over head_dim / 2 rotary frequencies
    layer_tables: bool = False  # each layer gathers its own M-RoPE tables from the shared angles


TINY_V, LARGER_V = VisionSizes(), VisionSizes(hidden=128, heads=2, blocks=3, side=6, seq=48, out=96, deepstack=(0, 1))
TINY_D, LARGER_D = DecoderSizes(), DecoderSizes(hidden=128, heads=2, layers=3, tokens=24, deepstack=3,
                                                sections=(12, 10, 10))


class _G:
    """Nodes and initializers with torch-style names."""

    def __init__(self, seed: int):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def c(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def w(self, name: str, shape: tuple[int, ...], std: float | None = None) -> str:
        std = std if std is not None else 1.0 / np.sqrt(shape[0])
        return self.c(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def i64(self, name: str, values: list[int]) -> str:
        return self.c(name, np.asarray(values, np.int64))


def _layernorm(g: _G, x: str, p: str, d: int) -> str:
    return g.op("LayerNormalization", [x, g.c(f"{p}.weight", (1 + 0.1 * g.rng.standard_normal(d)).astype(np.float32)),
                                       g.c(f"{p}.bias", (0.05 * g.rng.standard_normal(d)).astype(np.float32))],
                f"/{p}/LayerNormalization", axis=-1, epsilon=1e-6)


def _gelu(g: _G, x: str, p: str) -> str:
    s = g.op("Mul", [x, g.c(f"{p}.k", np.float32(1.702))], f"/{p}/Mul")
    return g.op("Mul", [x, g.op("Sigmoid", [s], f"/{p}/Sigmoid")], f"/{p}/Mul_1")


def _rotate(g: _G, x: str, cos: str, sin: str, p: str, hd: int) -> str:
    """x * cos + rotate_half(x) * sin on the last axis (torch's Slice/Neg/Concat form)."""
    a = g.op("Slice", [x, g.i64(f"{p}.s0", [0]), g.i64(f"{p}.s1", [hd // 2]), g.i64(f"{p}.ax", [-1])], f"/{p}/Slice")
    b = g.op("Slice", [x, g.i64(f"{p}.s2", [hd // 2]), g.i64(f"{p}.s3", [hd]), g.i64(f"{p}.ax2", [-1])], f"/{p}/Slice_1")
    rot = g.op("Concat", [g.op("Neg", [b], f"/{p}/Neg"), a], f"/{p}/Concat", axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos], f"/{p}/Mul"), g.op("Mul", [rot, sin], f"/{p}/Mul_1")], f"/{p}/Add")


MASKS = ("additive", "bool", "causal")  # how the graph masks attention: an input added, a bool input through
# Where, or a causal mask built inside the graph (Trilu, Less, Where) and added


def _masked(g: _G, scores: str, p: str, mask: str, fill: float, n: int) -> str:
    """Scores with the mask applied the way ``mask`` says (``fill``: the value masked entries get)."""
    if mask == "additive":
        return g.op("Add", [scores, "attention_mask"], f"/{p}/Add")
    if mask == "bool":  # True = attend
        return g.op("Where", ["attention_mask", scores, g.c(f"{p}.fill", np.float32(fill))], f"/{p}/Where")
    tri = g.op("Trilu", [g.c(f"{p}.ones", np.ones((n, n), np.float32))], f"/{p}/Trilu", upper=0)
    masked = g.op("Less", [tri, g.c(f"{p}.half", np.float32(0.5))], f"/{p}/Less")
    add = g.op("Where", [masked, g.c(f"{p}.fill", np.float32(fill)), g.c(f"{p}.zero", np.float32(0))], f"/{p}/Where")
    return g.op("Add", [scores, add], f"/{p}/Add")


def _mask_input(mask: str, shape: list[int]) -> list[onnx.ValueInfoProto]:
    if mask == "causal":
        return []
    kind = TensorProto.BOOL if mask == "bool" else TensorProto.FLOAT
    return [helper.make_tensor_value_info("attention_mask", kind, shape)]


def _theta(rotary_dim: int) -> np.ndarray:
    return (1.0 / (10000 ** (np.arange(0, rotary_dim, 2) / rotary_dim))).astype(np.float32)


def _block_tables(g: _G, blk: int, swapped: bool) -> tuple[str, str]:
    """One vision block's own rotary tables from position_ids (rows h, w picked by a Gather; ``swapped``: w, h)."""
    pre = f"/blocks.{blk}/rotary"
    f2 = g.op("Gather", ["position_ids", g.i64(f"rotary.rows_{blk}", [1, 0] if swapped else [0, 1])], f"{pre}/Gather",
              axis=0)
    f2 = g.op("Cast", [f2], f"{pre}/Cast", to=TensorProto.FLOAT)
    f2 = g.op("Unsqueeze", [f2, "rotary.ax"], f"{pre}/Unsqueeze")
    f2 = g.op("Mul", [f2, "rotary.theta"], f"{pre}/Mul")
    f2 = g.op("Transpose", [f2], f"{pre}/Transpose", perm=[1, 0, 2])
    f2 = g.op("Reshape", [f2, "rotary.shape"], f"{pre}/Reshape")
    c2, s2 = (g.op(o, [f2], f"{pre}/{o}") for o in ("Cos", "Sin"))
    cos, sin = (g.op("Unsqueeze", [g.op("Concat", [t, t], f"{pre}/Concat_{n}", axis=-1), "rotary.ax1"],
                     f"{pre}/Unsqueeze_{n}") for n, t in (("cos", c2), ("sin", s2)))
    return cos, sin


def _layer_tables(g: _G, lay: int, sections: tuple[int, int, int], interleaved: bool) -> tuple[str, str]:
    """One decoder layer's own M-RoPE tables gathered from the shared angles (``interleaved=False``: chunked)."""
    pre = f"/layers.{lay}/rotary"
    f2 = g.op("Gather", ["/rotary/Reshape_output_0", g.c(f"rotary.mrope_reindex_{lay}", mrope_reindex(sections, interleaved))],
              f"{pre}/Gather", axis=1)
    out = []
    for n, o in (("cos", "Cos"), ("sin", "Sin")):
        c = g.op(o, [f2], f"{pre}/{o}")
        c = g.op("Concat", [c, c], f"{pre}/Concat_{n}", axis=-1)
        out.append(g.op("Unsqueeze", [c, f"rotary.{n}_ax"], f"{pre}/Unsqueeze_{n}"))
    return out[0], out[1]


def vision_model(s: VisionSizes, fault: str | None = None, seed: int = 0, mask_kind: str = "additive",
                 fill: float = -65504.0, fault_block: int = 1) -> onnx.ModelProto:
    """``fault``: see the module; ``rows_swapped_block`` / ``residual_dropped`` put it in ``fault_block`` (after the
    first mask Add): that block reads the rotary rows as (w, h) / adds no attention residual."""
    g = _G(seed)
    d, hd, pd = s.hidden, s.hidden // s.heads, 6 * s.patch * s.patch
    # rotary tables: MNN's VisionRotary (rotary_dim = head_dim / 2; rows h then w; cat(emb, emb))
    pos = "position_ids"
    if fault == "rows_swapped":
        pos = g.op("Gather", [pos, g.i64("rotary.rows", [1, 0])], "/rotary/Gather", axis=0)
    f = g.op("Cast", [pos], "/rotary/Cast", to=TensorProto.FLOAT)
    f = g.op("Unsqueeze", [f, g.i64("rotary.ax", [-1])], "/rotary/Unsqueeze")
    f = g.op("Mul", [f, g.c("rotary.theta", _theta(hd // 2))], "/rotary/Mul")
    f = g.op("Transpose", [f], "/rotary/Transpose", perm=[1, 0, 2])
    f = g.op("Reshape", [f, g.i64("rotary.shape", [s.seq, hd // 2])], "/rotary/Reshape")
    cos1, sin1 = g.op("Cos", [f], "/rotary/Cos"), g.op("Sin", [f], "/rotary/Sin")
    cos = g.op("Unsqueeze", [g.op("Concat", [cos1, cos1], "/rotary/Concat", axis=-1), g.i64("rotary.ax1", [1])],
               "/rotary/Unsqueeze_1")
    sin = g.op("Unsqueeze", [g.op("Concat", [sin1, sin1], "/rotary/Concat_1", axis=-1), g.i64("rotary.ax2", [1])],
               "/rotary/Unsqueeze_2")
    # patch embed + bilinear position embedding through idx_tensor / weight_tensor
    h = g.op("Add", [g.op("MatMul", ["patches", g.w("patch_embed.weight", (pd, d))], "/patch_embed/MatMul"),
                     g.c("patch_embed.bias", (0.02 * g.rng.standard_normal(d)).astype(np.float32))], "/patch_embed/Add")
    pe = g.op("Gather", [g.w("pos_embed.weight", (s.side * s.side, d), 0.5), "idx_tensor"], "/pos_embed/Gather", axis=0)
    wt = g.op("Unsqueeze", ["weight_tensor", g.i64("pos.ax", [2])], "/Unsqueeze")
    pe = g.op("ReduceSum", [g.op("Mul", [pe, wt], "/Mul"), g.i64("pos.sum", [0])], "/ReduceSum", keepdims=0)
    h = g.op("Add", [h, pe], "/Add")
    mask = "attention_mask"
    if fault == "mask_not_copied":
        mask = g.c("attention_mask.never_copied", np.zeros((1, s.seq, s.seq), np.float32))
    own_cos, own_sin = cos, sin
    feats = []
    for i in range(s.blocks):
        p = f"blocks.{i}"
        x = _layernorm(g, h, f"{p}/norm1", d)
        qkv = g.op("MatMul", [x, g.w(f"{p}.qkv", (d, 3 * d))], f"/{p}/attn/qkv/MatMul")
        qkv = g.op("Reshape", [qkv, g.i64(f"{p}.qkv_shape", [s.seq, 3, s.heads, hd])], f"/{p}/attn/Reshape")
        parts = [g.op("Gather", [qkv, g.c(f"{p}.{n}_i", np.asarray(j, np.int64))], f"/{p}/attn/Gather_{j}", axis=1)
                 for j, n in enumerate("qkv")]  # [seq, heads, hd]
        cos, sin = (_block_tables(g, i, fault == "rows_swapped_block" and i == fault_block) if s.block_tables
                    else (own_cos, own_sin))
        q = _rotate(g, parts[0], cos, sin, f"{p}/attn/rotary_q", hd)
        k = _rotate(g, parts[1], cos, sin, f"{p}/attn/rotary_k", hd)
        q, k, v = (g.op("Transpose", [t], f"/{p}/attn/Transpose_{n}", perm=[1, 0, 2]) for n, t in
                   (("q", q), ("k", k), ("v", parts[2])))
        kt = g.op("Transpose", [k], f"/{p}/attn/Transpose_kt", perm=[0, 2, 1])
        sc = g.op("Mul", [g.op("MatMul", [q, kt], f"/{p}/attn/MatMul"), g.c(f"{p}.scale", np.float32(hd ** -0.5))],
                  f"/{p}/attn/Mul")
        if mask_kind == "additive" or fault == "mask_not_copied":
            sc = g.op("Add", [sc, mask], f"/{p}/attn/Add")
        else:
            sc = _masked(g, sc, f"{p}/attn", mask_kind, fill, s.seq)
        att = g.op("MatMul", [g.op("Softmax", [sc], f"/{p}/attn/Softmax", axis=-1), v], f"/{p}/attn/MatMul_1")
        att = g.op("Reshape", [g.op("Transpose", [att], f"/{p}/attn/Transpose_o", perm=[1, 0, 2]),
                               g.i64(f"{p}.o_shape", [s.seq, d])], f"/{p}/attn/Reshape_1")
        proj = g.op("MatMul", [att, g.w(f"{p}.proj", (d, d))], f"/{p}/attn/proj/MatMul")
        h = proj if fault == "residual_dropped" and i == fault_block else g.op("Add", [h, proj], f"/{p}/Add")
        x = _layernorm(g, h, f"{p}/norm2", d)
        x = _gelu(g, g.op("MatMul", [x, g.w(f"{p}.fc1", (d, 2 * d))], f"/{p}/mlp/fc1/MatMul"), f"{p}/mlp/act")
        h = g.op("Add", [h, g.op("MatMul", [x, g.w(f"{p}.fc2", (2 * d, d))], f"/{p}/mlp/fc2/MatMul")], f"/{p}/Add_1")
        if i in s.deepstack:
            feats.append(_merger(g, h, f"deepstack_merger_list.{s.deepstack.index(i)}", s))
    emb = _merger(g, h, "merger", s)
    emb = g.op("Unsqueeze", [emb, g.i64("merger.ax", [1])], "/merger/Unsqueeze")
    stacked = g.op("Concat", [g.op("Unsqueeze", [ft, g.i64(f"ds{j}.ax", [0])], f"/Unsqueeze_{j + 1}")
                              for j, ft in enumerate(feats)], "/Concat", axis=0)
    g.nodes.append(helper.make_node("Identity", [emb], ["image_embeds"], name="/Identity"))
    g.nodes.append(helper.make_node("Identity", [stacked], ["deepstack_feature"], name="/Identity_1"))
    ins = [helper.make_tensor_value_info("patches", TensorProto.FLOAT, [s.seq, pd]),
           helper.make_tensor_value_info("position_ids", TensorProto.INT32, [2, s.seq]),
           *_mask_input(mask_kind, [1, s.seq, s.seq]),
           helper.make_tensor_value_info("idx_tensor", TensorProto.INT32, [4, s.seq]),
           helper.make_tensor_value_info("weight_tensor", TensorProto.FLOAT, [4, s.seq])]
    outs = [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, [s.seq // 4, 1, s.out]),
            helper.make_tensor_value_info("deepstack_feature", TensorProto.FLOAT, [len(feats), s.seq // 4, s.out])]
    return _model(g, "visual", ins, outs)


def _merger(g: _G, h: str, p: str, s: VisionSizes) -> str:
    x = _layernorm(g, h, f"{p}/norm", s.hidden)
    x = g.op("Reshape", [x, g.i64(f"{p}.shape", [s.seq // 4, 4 * s.hidden])], f"/{p}/Reshape")
    x = _gelu(g, g.op("MatMul", [x, g.w(f"{p}.fc1", (4 * s.hidden, 4 * s.hidden))], f"/{p}/fc1/MatMul"), f"{p}/act")
    return g.op("MatMul", [x, g.w(f"{p}.fc2", (4 * s.hidden, s.out))], f"/{p}/fc2/MatMul")


def mrope_reindex(sections: tuple[int, int, int], interleaved: bool = True) -> np.ndarray:
    """Gather indices into [T, 3·half] (axis-major) picking each frequency's axis: Qwen3-VL's interleaving
    (h at j%3==1, w at j%3==2 while j < 3·section) or Qwen2-VL's contiguous chunks."""
    half = sum(sections)
    axis = np.zeros(half, np.int64)
    if interleaved:
        for a, off in ((1, 1), (2, 2)):
            axis[off:sections[a] * 3:3] = a
    else:
        axis[sections[0]:sections[0] + sections[1]] = 1
        axis[sections[0] + sections[1]:] = 2
    return axis * half + np.arange(half)


def _rms(g: _G, x: str, p: str, d: int) -> str:
    var = g.op("ReduceMean", [g.op("Pow", [x, g.c(f"{p}.two", np.float32(2))], f"/{p}/Pow")], f"/{p}/ReduceMean",
               axes=[-1], keepdims=1)
    inv = g.op("Div", [g.c(f"{p}.one", np.float32(1)),
                       g.op("Sqrt", [g.op("Add", [var, g.c(f"{p}.eps", np.float32(1e-6))], f"/{p}/Add")], f"/{p}/Sqrt")],
               f"/{p}/Div")
    return g.op("Mul", [g.c(f"{p}.weight", (1 + 0.1 * g.rng.standard_normal(d)).astype(np.float32)),
                        g.op("Mul", [x, inv], f"/{p}/Mul")], f"/{p}/Mul_1")


def decoder_model(s: DecoderSizes, fault: str | None = None, seed: int = 1, mask_kind: str = "additive",
                  fill: float = -65504.0, fault_block: int = 1) -> onnx.ModelProto:
    """``fault``: see the module; ``chunked_mrope_layer`` puts the chunked M-RoPE in layer ``fault_block`` only
    (its own Gather over the same angles, after the first mask Add)."""
    g = _G(seed)
    d, hd, t = s.hidden, s.hidden // s.heads, s.tokens
    half = hd // 2
    assert sum(s.sections) == half
    f = g.op("Cast", ["position_ids"], "/rotary/Cast", to=TensorProto.FLOAT)
    f = g.op("Mul", [g.op("Unsqueeze", [f, g.i64("rotary.ax", [-1])], "/rotary/Unsqueeze"),
                     g.c("rotary.theta", _theta(hd))], "/rotary/Mul")  # [3, T, half]
    f = g.op("Reshape", [g.op("Transpose", [f], "/rotary/Transpose", perm=[1, 0, 2]),
                         g.i64("rotary.shape", [t, 3 * half])], "/rotary/Reshape")
    pick = g.c("rotary.mrope_reindex", mrope_reindex(s.sections, interleaved=fault != "chunked_mrope"))
    f = g.op("Gather", [f, pick], "/rotary/Gather", axis=1)  # [T, half]
    tabs = []
    for n, op in (("cos", "Cos"), ("sin", "Sin")):
        c = g.op(op, [f], f"/rotary/{op}")
        c = g.op("Concat", [c, c], f"/rotary/Concat_{n}", axis=-1)
        tabs.append(g.op("Unsqueeze", [c, g.i64(f"rotary.{n}_ax", [0, 1])], f"/rotary/Unsqueeze_{n}"))  # [1,1,T,hd]
    cos, sin = tabs
    shared = (cos, sin)
    h = g.op("Transpose", ["input_ids"], "/Transpose", perm=[1, 0, 2])  # [1, T, d]
    for i in range(s.layers):
        p = f"layers.{i}"
        x = _rms(g, h, f"{p}/input_layernorm", d)
        heads = []
        for n in "qkv":
            y = g.op("MatMul", [x, g.w(f"{p}.{n}", (d, d))], f"/{p}/self_attn/{n}_proj/MatMul")
            y = g.op("Reshape", [y, g.i64(f"{p}.{n}_shape", [1, t, s.heads, hd])], f"/{p}/self_attn/Reshape_{n}")
            heads.append(g.op("Transpose", [y], f"/{p}/self_attn/Transpose_{n}", perm=[0, 2, 1, 3]))
        cos, sin = (_layer_tables(g, i, s.sections, not (fault == "chunked_mrope_layer" and i == fault_block))
                    if s.layer_tables else shared)
        q = _rotate(g, heads[0], cos, sin, f"{p}/self_attn/rotary_q", hd)
        k = _rotate(g, heads[1], cos, sin, f"{p}/self_attn/rotary_k", hd)
        kt = g.op("Transpose", [k], f"/{p}/self_attn/Transpose_kt", perm=[0, 1, 3, 2])
        sc = g.op("Mul", [g.op("MatMul", [q, kt], f"/{p}/self_attn/MatMul"), g.c(f"{p}.scale", np.float32(hd ** -0.5))],
                  f"/{p}/self_attn/Mul")
        sc = _masked(g, sc, f"{p}/self_attn", mask_kind, fill, t)
        a = g.op("MatMul", [g.op("Softmax", [sc], f"/{p}/self_attn/Softmax", axis=-1), heads[2]], f"/{p}/self_attn/MatMul_1")
        a = g.op("Reshape", [g.op("Transpose", [a], f"/{p}/self_attn/Transpose_o", perm=[0, 2, 1, 3]),
                             g.i64(f"{p}.o_shape", [1, t, d])], f"/{p}/self_attn/Reshape_o")
        h = g.op("Add", [h, g.op("MatMul", [a, g.w(f"{p}.o", (d, d))], f"/{p}/self_attn/o_proj/MatMul")], f"/{p}/Add")
        x = _rms(g, h, f"{p}/post_attention_layernorm", d)
        gate = g.op("MatMul", [x, g.w(f"{p}.gate", (d, 2 * d))], f"/{p}/mlp/gate_proj/MatMul")
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"/{p}/mlp/act_fn/Sigmoid")], f"/{p}/mlp/act_fn/Mul")
        up = g.op("MatMul", [x, g.w(f"{p}.up", (d, 2 * d))], f"/{p}/mlp/up_proj/MatMul")
        mlp = g.op("MatMul", [g.op("Mul", [act, up], f"/{p}/mlp/Mul"), g.w(f"{p}.down", (2 * d, d))],
                   f"/{p}/mlp/down_proj/MatMul")
        h = g.op("Add", [h, mlp], f"/{p}/Add_1")
        if i < s.deepstack and not (fault == "deepstack_dropped" and i == 0):
            ds = g.op("Gather", ["deepstack_embeds", g.c(f"ds.{i}", np.asarray(i, np.int64))], f"/Gather_{i + 1}", axis=0)
            h = g.op("Add", [h, ds], f"/Add_{i + 1}")
    h = _rms(g, h, "norm", d)
    g.nodes.append(helper.make_node("MatMul", [h, g.w("lm_head", (d, s.vocab))], ["logits"], name="/lm_head/MatMul"))
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, [t, 1, d]),
           *_mask_input(mask_kind, [1, 1, t, t]),
           helper.make_tensor_value_info("position_ids", TensorProto.INT32, [3, t]),
           helper.make_tensor_value_info("deepstack_embeds", TensorProto.FLOAT, [s.deepstack, t, d])]
    return _model(g, "llm", ins, [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, t, s.vocab])])


def _model(g: _G, name: str, ins: list[onnx.ValueInfoProto], outs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(g.nodes, name, ins, outs, g.inits),
                          opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qnn-debug-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def write_pair(tmp: Path, which: str, sizes: VisionSizes | DecoderSizes, fault: str | None) -> tuple[Path, Path]:
    """(clean, faulty) ``visual.onnx`` / ``llm.onnx`` under ``tmp`` (the faulty one is what the target runs)."""
    build = vision_model if which == "visual" else decoder_model
    clean, bug = tmp / f"{which}.onnx", tmp / f"{which}_{fault}.onnx"
    tmp.mkdir(parents=True, exist_ok=True)
    onnx.save(build(sizes), str(clean))  # type: ignore[arg-type]
    onnx.save(build(sizes, fault), str(bug))  # type: ignore[arg-type]
    return clean, bug
