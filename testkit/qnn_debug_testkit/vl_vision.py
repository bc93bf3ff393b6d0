"""The ONNX graph of Qwen3-VL's vision encoder, written the way llmexport's torch export writes ``visual.onnx``.

Inputs and outputs are MNN's (``Qwen3Vision.export``): ``patches`` ``[seq, C*T*P*P]``, ``position_ids``
``[2, seq]`` int32 (the h and w rows of the 2-D rotary), ``attention_mask`` ``[1, seq, seq]`` float (0 inside
one frame's block, lowest float elsewhere), ``idx_tensor`` ``[4, seq]`` int32 (the four corners of the
bilinear interpolation of the learned position grid, read by a Gather) and ``weight_tensor`` ``[4, seq]``;
outputs ``image_embeds`` ``[seq/4, 1, text hidden]`` (patch merger) and ``deepstack_feature``
``[k, seq/4, text hidden]`` (the deepstack mergers of the chosen blocks, stacked).

The body: ``patch_embed`` as a Linear (MNN replaces the Conv3d by one), the interpolated position embedding
``sum_i pos_embed[idx_i] * weight_i``, 2-D rotary (``VisionRotary``: half of the rotary frequencies from the
h row, half from the w row, then doubled), blocks with LayerNorm, fused qkv, attention with the mask, MLP
with tanh GELU; node names ``/blocks.N/...`` as MNN's vision ``Decoder`` wrapper names them.

Faults (graph-level): ``rotary_swapped_block`` (that block reads the rotary rows as w, h), ``mask_dropped_block``
(that block's attention adds a zero mask: the mask buffer was never written), ``tiled_pos_embed`` (a Tile, which
MNN's QNN backend does not implement, inside the encoder's NPU segment).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from pydantic import BaseModel, Field

from .sized import Qwen3Sizes
from .tiny_graph import OPSET, _attention, _Builder, _linear, _rotary
from .vl_sizes import VisionSizes

InitHook = Callable[[str, np.ndarray], onnx.TensorProto]


class VisionFaults(BaseModel):
    rotary_swapped_block: int | None = Field(default=None, description="block whose 2-D rotary takes rows (w, h)")
    mask_dropped_block: int | None = Field(default=None, description="block whose attention sees a zero mask")
    tiled_pos_embed: bool = Field(default=False, description=(
        "repeat the interpolated position embedding over the patches with a Tile, as ports of the Hugging Face "
        "encoder (pos_embed.repeat(t, 1)) write it: same numbers, but MNN's QNN backend has no Tile"))


class VisionWeights(Mapping[str, np.ndarray]):
    """Each weight made on demand, seeded by (seed, name) — nothing kept, the same values every time."""

    def __init__(self, v: VisionSizes):
        self.v = v
        h, f, h4, o = v.hidden, v.intermediate, 4 * v.hidden, v.out_hidden
        s: dict[str, tuple[int, ...]] = {"patch_embed.weight": (h, v.patch_dim), "patch_embed.bias": (h,),
                                         "pos_embed.weight": (v.num_grid_per_side ** 2, h)}
        for i in range(v.depth):
            p = f"blocks.{i}"
            s.update({f"{p}.norm1.weight": (h,), f"{p}.norm1.bias": (h,), f"{p}.attn.qkv.weight": (3 * h, h),
                      f"{p}.attn.qkv.bias": (3 * h,), f"{p}.attn.proj.weight": (h, h), f"{p}.attn.proj.bias": (h,),
                      f"{p}.norm2.weight": (h,), f"{p}.norm2.bias": (h,), f"{p}.mlp.linear_fc1.weight": (f, h),
                      f"{p}.mlp.linear_fc1.bias": (f,), f"{p}.mlp.linear_fc2.weight": (h, f),
                      f"{p}.mlp.linear_fc2.bias": (h,)})
        for p, norm in [("merger", h)] + [(f"deepstack_merger_list.{k}", h4) for k in range(len(v.deepstack_indexes))]:
            s.update({f"{p}.norm.weight": (norm,), f"{p}.norm.bias": (norm,), f"{p}.linear_fc1.weight": (h4, h4),
                      f"{p}.linear_fc1.bias": (h4,), f"{p}.linear_fc2.weight": (o, h4), f"{p}.linear_fc2.bias": (o,)})
        self.shapes = s

    def __getitem__(self, name: str) -> np.ndarray:
        shape = self.shapes[name]
        digest = hashlib.sha256(f"vision:{self.v.seed}:{name}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        if name.endswith(".bias"):
            return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        if len(shape) == 1:  # LayerNorm gains near 1
            return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        if name == "pos_embed.weight":
            return (0.5 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        w = rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(1.0 / np.sqrt(shape[1]))
        return w

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def weight_bytes(self) -> int:
        return 4 * sum(int(np.prod(s)) for s in self.shapes.values())


def _layer_norm(b: _Builder, scope: str, x: str, w: Mapping[str, np.ndarray], name: str, eps: float) -> str:
    return b.one(scope, "LayerNormalization", [x, b.init(f"{name}.weight", w[f"{name}.weight"]),
                                               b.init(f"{name}.bias", w[f"{name}.bias"])], axis=-1, epsilon=eps)


def _dense(b: _Builder, scope: str, x: str, w: Mapping[str, np.ndarray], name: str) -> str:
    y = _linear(b, scope, x, w[f"{name}.weight"], name)
    return b.one(scope, "Add", [y, b.init(f"{name}.bias", w[f"{name}.bias"])])


def _gelu_tanh(b: _Builder, scope: str, x: str) -> str:
    """``gelu(approximate='tanh')`` as torch writes it at opset 17."""
    cube = b.one(scope, "Pow", [x, b.init(f"{scope}/three", np.asarray(3.0, np.float32))])
    inner = b.one(scope, "Add", [x, b.one(scope, "Mul", [cube, b.init(f"{scope}/c", np.asarray(0.044715, np.float32))])])
    inner = b.one(scope, "Mul", [inner, b.init(f"{scope}/k", np.asarray(np.sqrt(2.0 / np.pi), np.float32))])
    t = b.one(scope, "Add", [b.one(scope, "Tanh", [inner]), "const_one"])
    return b.one(scope, "Mul", [b.one(scope, "Mul", [x, b.init(f"{scope}/half", np.asarray(0.5, np.float32))]), t])


def _gelu_erf(b: _Builder, scope: str, x: str) -> str:
    """exact ``nn.GELU()`` as torch writes it: ``x * 0.5 * (1 + erf(x / sqrt 2))``."""
    e = b.one(scope, "Erf", [b.one(scope, "Div", [x, b.init(f"{scope}/sqrt2", np.asarray(np.sqrt(2.0), np.float32))])])
    half = b.one(scope, "Mul", [x, b.init(f"{scope}/half", np.asarray(0.5, np.float32))])
    return b.one(scope, "Mul", [half, b.one(scope, "Add", [e, "const_one"])])


def _rotary_2d(b: _Builder, scope: str, v: VisionSizes, swapped: bool) -> tuple[str, str]:
    """cos/sin ``[1, seq, 1, head_dim]`` from ``position_ids`` ``[2, seq]`` (MNN's ``VisionRotary.forward``)."""
    rdim = v.head_dim // 2
    theta = (1.0 / (v.rope_theta ** (np.arange(0, rdim, 2, dtype=np.float32) / rdim))).astype(np.float32)
    pos = "position_ids"
    if swapped:
        pos = b.one(scope, "Gather", [pos, b.const_i64(f"{scope}/rows_wh", [1, 0])], axis=0)
    p = b.one(scope, "Cast", [pos], to=TensorProto.FLOAT)
    p = b.one(scope, "Unsqueeze", [p, b.const_i64(f"{scope}/last", [-1])])  # [2, seq, 1]
    ang = b.one(scope, "Mul", [p, b.init(f"{scope}/theta", theta)])  # [2, seq, rdim/2]
    ang = b.one(scope, "Transpose", [ang], perm=[1, 0, 2])
    ang = b.one(scope, "Reshape", [ang, b.const_i64(f"{scope}/flat", [-1, rdim])])  # [seq, rdim]: h freqs, w freqs
    axes = b.const_i64(f"{scope}/axes", [0, 2])
    out = []
    for fn in ("Cos", "Sin"):
        t = b.one(scope, fn, [ang])
        t = b.one(scope, "Concat", [t, t], axis=-1)
        out.append(b.one(scope, "Unsqueeze", [t, axes]))
    return out[0], out[1]


def _merger(b: _Builder, scope: str, x: str, v: VisionSizes, w: Mapping[str, np.ndarray], name: str, post: bool) -> str:
    """Patch merger: 2x2 neighbours (consecutive rows) → one token of the text width. ``post``: the deepstack form
    (LayerNorm after the 4-row concatenation), else LayerNorm first (the final merger)."""
    four = b.const_i64(f"{scope}/merge_shape", [-1, 4 * v.hidden])
    if post:
        y = _layer_norm(b, f"{scope}/norm", b.one(scope, "Reshape", [x, four]), w, f"{name}.norm", v.ln_eps)
    else:
        y = b.one(scope, "Reshape", [_layer_norm(b, f"{scope}/norm", x, w, f"{name}.norm", v.ln_eps), four])
    y = _dense(b, f"{scope}/linear_fc1", y, w, f"{name}.linear_fc1")
    y = _gelu_erf(b, f"{scope}/act_fn", y)
    return _dense(b, f"{scope}/linear_fc2", y, w, f"{name}.linear_fc2")


def build_vision_graph(v: VisionSizes, w: Mapping[str, np.ndarray], *, seq_len: int | None = None,
                       faults: VisionFaults | None = None, init_hook: InitHook | None = None) -> onnx.ModelProto:
    """``visual.onnx``; ``seq_len`` None keeps MNN's dynamic ``size`` axes."""
    faults = faults or VisionFaults()
    b = _Builder(init_hook)
    b.init("const_one", np.asarray(1.0, np.float32))
    h, hd = v.hidden, v.head_dim
    heads = Qwen3Sizes(layers=v.depth, hidden=h, heads=v.heads, kv_heads=v.heads, head_dim=hd, intermediate=v.intermediate,
                       vocab=260)  # what the shared attention writer reads: head counts and widths
    x = _dense(b, "/patch_embed", "patches", w, "patch_embed")
    pe = b.one("/pos_embed", "Gather", [b.init("pos_embed.weight", w["pos_embed.weight"]), "idx_tensor"], axis=0)
    pe = b.one("/pos_embed", "Mul", [pe, b.one("/pos_embed", "Unsqueeze", ["weight_tensor", b.const_i64("/pos_embed/axis", [2])])])
    pe = b.one("/pos_embed", "ReduceSum", [pe, b.const_i64("/pos_embed/sum_axis", [0])], keepdims=0)
    if faults.tiled_pos_embed:
        first = [b.const_i64("/pos_embed/s0", [0]), b.const_i64("/pos_embed/e1", [1])]
        rows = b.one("/pos_embed", "Slice", [b.one("/pos_embed", "Shape", ["patches"]), *first])
        have = b.one("/pos_embed", "Slice", [b.one("/pos_embed", "Shape", [pe]), *first])
        reps = b.one("/pos_embed", "Concat", [b.one("/pos_embed", "Div", [rows, have]), b.const_i64("/pos_embed/one", [1])], axis=0)
        pe = b.one("/pos_embed", "Tile", [pe, reps])
    x = b.one("", "Add", [x, pe])
    cos, sin = _rotary_2d(b, "/rotary", v, swapped=False)
    deep: list[str] = []
    for i in range(v.depth):
        B = f"/blocks.{i}"
        p = f"blocks.{i}"
        c, s = (_rotary_2d(b, f"{B}/rotary_swapped", v, swapped=True) if faults.rotary_swapped_block == i else (cos, sin))
        mask = "attention_mask"
        if faults.mask_dropped_block == i:
            mask = b.one(f"{B}/mask_unwritten", "ConstantOfShape", [b.one(f"{B}/mask_unwritten", "Shape", [mask])],
                         value=numpy_helper.from_array(np.zeros(1, np.float32)))
        n1 = _layer_norm(b, f"{B}/input_layernorm", x, w, f"{p}.norm1", v.ln_eps)
        sa = f"{B}/self_attn"
        qkv = _dense(b, f"{sa}/qkv_proj", n1, w, f"{p}.attn.qkv")
        q, k, val = b.op(sa, "Split", [qkv, b.const_i64(f"{sa}/split", [h, h, h])], outputs=3, axis=-1)
        shape = b.const_i64(f"{sa}/head_shape", [1, -1, v.heads, hd])
        q, k, val = (b.one(sa, "Reshape", [t, shape]) for t in (q, k, val))
        q = _rotary(b, f"{sa}/rotary_q", q, c, s, hd, False)
        k = _rotary(b, f"{sa}/rotary_k", k, c, s, hd, False)
        att = _attention(b, sa, q, k, val, mask, heads, "onnx", i)
        att = b.one(sa, "Reshape", [att, b.const_i64(f"{sa}/flat", [-1, h])])
        x = b.one(B, "Add", [x, _dense(b, f"{sa}/o_proj", att, w, f"{p}.attn.proj")])
        n2 = _layer_norm(b, f"{B}/post_attention_layernorm", x, w, f"{p}.norm2", v.ln_eps)
        m = _dense(b, f"{B}/mlp/linear_fc1", n2, w, f"{p}.mlp.linear_fc1")
        m = _dense(b, f"{B}/mlp/linear_fc2", _gelu_tanh(b, f"{B}/mlp/act_fn", m), w, f"{p}.mlp.linear_fc2")
        x = b.one(B, "Add", [x, m])
        if i in v.deepstack_indexes:
            k_ = v.deepstack_indexes.index(i)
            f = _merger(b, f"/deepstack_merger_list.{k_}", x, v, w, f"deepstack_merger_list.{k_}", post=True)
            deep.append(b.one(f"/deepstack_merger_list.{k_}", "Unsqueeze", [f, b.const_i64(f"/deepstack_merger_list.{k_}/axis", [0])]))
    merged = _merger(b, "/merger", x, v, w, "merger", post=False)
    b.nodes.append(helper.make_node("Unsqueeze", [merged, b.const_i64("/image_embeds/axis", [1])], ["image_embeds"],
                                    name="/image_embeds/Unsqueeze"))
    if deep:
        b.nodes.append(helper.make_node("Concat", deep, ["deepstack_feature"], name="/deepstack/Concat", axis=0))
    seq: int | str = seq_len if seq_len is not None else "size"
    tokens: int | str = seq_len // 4 if seq_len is not None else "tokens"
    inputs = [
        helper.make_tensor_value_info("patches", TensorProto.FLOAT, [seq, v.patch_dim]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT32, [2, seq]),
        helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq, seq]),
        helper.make_tensor_value_info("idx_tensor", TensorProto.INT32, [4, seq]),
        helper.make_tensor_value_info("weight_tensor", TensorProto.FLOAT, [4, seq]),
    ]
    outputs = [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, [tokens, 1, v.out_hidden])]
    if deep:
        outputs.append(helper.make_tensor_value_info("deepstack_feature", TensorProto.FLOAT, [len(deep), tokens, v.out_hidden]))
    graph = helper.make_graph(b.nodes, "qwen3_vl_visual", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qnn-debug")
    model.ir_version = 9
    if init_hook is None:
        onnx.checker.check_model(model)
    return model
