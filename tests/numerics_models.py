"""Small graphs for the hard-numerics tests: fp16-range overflow (L2-norm on raw pixels, an LLM-shaped decoder
with large residual channels) and fused conv/deconv graphs. Built with onnx.helper; all run fully on HTP."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _f32(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def _i64(name: str, arr: list[int] | np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.int64), name)


def _model(nodes: list[onnx.NodeProto], name: str, inputs: list[onnx.ValueInfoProto],
           outputs: list[tuple[str, list[int]]], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape)
                                                    for o, shape in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qnn-debug-tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def l2norm_net(*, channels: int = 3, size: int = 32, scale: float = 1.0, variant: str = "global",
               conv: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x (raw 0..255 pixels) → [×scale] → [Conv 1x1] → L2 normalisation → ×gamma.

    ``variant``: ``global`` (x*x → one ReduceSum over C,H,W; QNN has no ReduceSumSquare), ``channel`` (x*x → ReduceSum over C,
    per pixel) or ``pow`` (Pow(x, 2) → ReduceSum over H,W, per channel). ``scale`` 1/256 is the fp16-safe variant.
    """
    rng = np.random.default_rng(seed)
    inits = [_f32("gamma", rng.uniform(0.5, 1.5, (1, channels, 1, 1)) * 10.0), _f32("eps", np.array(1e-6))]
    nodes = []
    src = "x"
    if scale != 1.0:
        inits.append(_f32("in_scale", np.array(scale)))
        nodes.append(helper.make_node("Mul", ["x", "in_scale"], ["xs"], name="rescale"))
        src = "xs"
    if conv:
        inits += [_f32("cw", np.eye(channels).reshape(channels, channels, 1, 1) + rng.normal(0, 0.05, (channels, channels, 1, 1))),
                  _f32("cb", rng.normal(0, 0.5, channels))]
        nodes.append(helper.make_node("Conv", [src, "cw", "cb"], ["feat"], name="mix"))
        src = "feat"
    if variant == "global":
        inits.append(_i64("axes", [1, 2, 3]))
        nodes += [helper.make_node("Mul", [src, src], ["sq"], name="square"),
                  helper.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], name="sumsq", keepdims=1)]
    elif variant == "channel":
        inits.append(_i64("axes", [1]))
        nodes += [helper.make_node("Mul", [src, src], ["sq"], name="square"),
                  helper.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], name="sumsq", keepdims=1)]
    elif variant == "pow":
        inits += [_i64("axes", [2, 3]), _f32("two", np.array(2.0))]
        nodes += [helper.make_node("Pow", [src, "two"], ["sq"], name="square"),
                  helper.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], name="sumsq", keepdims=1)]
    else:
        raise ValueError(variant)
    nodes += [helper.make_node("Add", ["sumsq", "eps"], ["sumsq_eps"], name="add_eps"),
              helper.make_node("Sqrt", ["sumsq_eps"], ["norm"], name="norm"),
              helper.make_node("Div", [src, "norm"], ["unit"], name="normalize"),
              helper.make_node("Mul", ["unit", "gamma"], ["y"], name="scale_out")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    return _model(nodes, f"l2norm_{variant}", [x], [("y", [1, channels, size, size])], inits)


def pixels(channels: int, size: int, seed: int = 0) -> np.ndarray:
    """Raw 8-bit image values 0..255 (smooth gradients plus noise, like a photo)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    base = np.stack([(0.3 + 0.7 * ((xx * (c + 1) + yy) % 1.0)) for c in range(channels)])
    img = np.clip(base * 255.0 + rng.normal(0, 12, base.shape), 0, 255)
    return np.round(img)[None].astype(np.float32)


def decoder_llm(*, hidden: int = 64, layers: int = 2, tokens: int = 16, heads: int = 4, kv_heads: int = 2,
                ffn: int = 128, vocab: int = 96, big_channels: tuple[int, ...] = (3, 17, 40),
                big_value: float = 1500.0, seed: int = 0) -> onnx.ModelProto:
    """An LLM-shaped decoder: token embedding (a few residual channels at LLM-typical outliers of
    ``big_value``), per layer decomposed RMSNorm (Pow → ReduceMean → Add → Sqrt → Div → Mul), q/k/v MatMuls,
    rotary embedding (rotate-half with Slice/Neg/Concat), grouped-query attention (kv heads repeated by
    Concat), causal Softmax, o-projection and residual Add, then RMSNorm and SwiGLU (x·Sigmoid(x) · up →
    down) with its residual; a final RMSNorm and an lm_head. Input ``ids`` int64 [1, tokens]."""
    rng = np.random.default_rng(seed)
    d = hidden // heads
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, shape: tuple[int, ...], std: float) -> str:
        inits.append(_f32(name, rng.normal(0, std, shape)))
        return name

    emb = rng.normal(0, 1.0, (vocab, hidden))
    for c in big_channels:
        emb[:, c] = big_value * rng.uniform(0.6, 1.0, vocab) * rng.choice([-1.0, 1.0])
    inits.append(_f32("embed", emb))
    inits += [_f32("two", np.array(2.0)), _f32("eps", np.array(1e-6)), _i64("ax_last", [-1])]
    pos = np.arange(tokens)[:, None] / (10000 ** (np.arange(0, d, 2) / d))[None]
    ang = np.concatenate([pos, pos], axis=-1)
    inits += [_f32("cos", np.cos(ang)[None, None]), _f32("sin", np.sin(ang)[None, None])]
    mask = np.triu(np.full((tokens, tokens), -1e4), 1)
    inits.append(_f32("mask", mask[None, None]))
    inits += [_f32("inv_sqrt_d", np.array(1.0 / np.sqrt(d))),
              _i64("q_shape", [1, tokens, heads, d]), _i64("kv_shape", [1, tokens, kv_heads, d]),
              _i64("o_shape", [1, tokens, hidden]),
              _i64("h0", [0]), _i64("h1", [d // 2]), _i64("h2", [d]), _i64("ax3", [3])]
    nodes.append(helper.make_node("Gather", ["embed", "ids"], ["h_0"], name="embed_tokens", axis=0))

    def rmsnorm(x: str, tag: str) -> str:
        g = w(f"{tag}_gamma", (hidden,), 0.1)
        inits[-1] = _f32(g, 1.0 + rng.normal(0, 0.1, hidden))
        nodes.extend([
            helper.make_node("Pow", [x, "two"], [f"{tag}_sq"], name=f"{tag}_pow"),
            helper.make_node("ReduceMean", [f"{tag}_sq"], [f"{tag}_ms"], name=f"{tag}_mean", axes=[-1], keepdims=1),
            helper.make_node("Add", [f"{tag}_ms", "eps"], [f"{tag}_mse"], name=f"{tag}_add_eps"),
            helper.make_node("Sqrt", [f"{tag}_mse"], [f"{tag}_rms"], name=f"{tag}_sqrt"),
            helper.make_node("Div", [x, f"{tag}_rms"], [f"{tag}_n"], name=f"{tag}_div"),
            helper.make_node("Mul", [f"{tag}_n", g], [f"{tag}_out"], name=f"{tag}_scale"),
        ])
        return f"{tag}_out"

    def rotary(x: str, tag: str) -> str:
        nodes.extend([
            helper.make_node("Slice", [x, "h0", "h1", "ax3"], [f"{tag}_x1"], name=f"{tag}_slice1"),
            helper.make_node("Slice", [x, "h1", "h2", "ax3"], [f"{tag}_x2"], name=f"{tag}_slice2"),
            helper.make_node("Neg", [f"{tag}_x2"], [f"{tag}_nx2"], name=f"{tag}_neg"),
            helper.make_node("Concat", [f"{tag}_nx2", f"{tag}_x1"], [f"{tag}_rot"], name=f"{tag}_cat", axis=3),
            helper.make_node("Mul", [x, "cos"], [f"{tag}_xc"], name=f"{tag}_mul_cos"),
            helper.make_node("Mul", [f"{tag}_rot", "sin"], [f"{tag}_xs"], name=f"{tag}_mul_sin"),
            helper.make_node("Add", [f"{tag}_xc", f"{tag}_xs"], [f"{tag}_out"], name=f"{tag}_add"),
        ])
        return f"{tag}_out"

    h = "h_0"
    std = 1.0 / np.sqrt(hidden)
    for li in range(layers):
        p = f"l{li}"
        n1 = rmsnorm(h, f"{p}_in_norm")
        for proj, width in (("q", hidden), ("k", kv_heads * d), ("v", kv_heads * d)):
            nodes.append(helper.make_node("MatMul", [n1, w(f"{p}_w{proj}", (hidden, width), std)], [f"{p}_{proj}"],
                                          name=f"{p}_{proj}_proj"))
        nodes += [helper.make_node("Reshape", [f"{p}_q", "q_shape"], [f"{p}_q4"], name=f"{p}_q_reshape"),
                  helper.make_node("Transpose", [f"{p}_q4"], [f"{p}_qh"], name=f"{p}_q_heads", perm=[0, 2, 1, 3])]
        for kv in ("k", "v"):
            nodes += [helper.make_node("Reshape", [f"{p}_{kv}", "kv_shape"], [f"{p}_{kv}4"], name=f"{p}_{kv}_reshape"),
                      helper.make_node("Transpose", [f"{p}_{kv}4"], [f"{p}_{kv}h"], name=f"{p}_{kv}_heads",
                                       perm=[0, 2, 1, 3])]
        qr = rotary(f"{p}_qh", f"{p}_rope_q")
        kr = rotary(f"{p}_kh", f"{p}_rope_k")
        rep = heads // kv_heads
        nodes += [helper.make_node("Concat", [kr] * rep, [f"{p}_kg"], name=f"{p}_gqa_k", axis=1),
                  helper.make_node("Concat", [f"{p}_vh"] * rep, [f"{p}_vg"], name=f"{p}_gqa_v", axis=1),
                  helper.make_node("Transpose", [f"{p}_kg"], [f"{p}_kt"], name=f"{p}_k_t", perm=[0, 1, 3, 2]),
                  helper.make_node("MatMul", [qr, f"{p}_kt"], [f"{p}_qk"], name=f"{p}_qk"),
                  helper.make_node("Mul", [f"{p}_qk", "inv_sqrt_d"], [f"{p}_qks"], name=f"{p}_qk_scale"),
                  helper.make_node("Add", [f"{p}_qks", "mask"], [f"{p}_qkm"], name=f"{p}_causal"),
                  helper.make_node("Softmax", [f"{p}_qkm"], [f"{p}_att"], name=f"{p}_softmax", axis=-1),
                  helper.make_node("MatMul", [f"{p}_att", f"{p}_vg"], [f"{p}_ctx"], name=f"{p}_att_v"),
                  helper.make_node("Transpose", [f"{p}_ctx"], [f"{p}_ctx_t"], name=f"{p}_ctx_t", perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"{p}_ctx_t", "o_shape"], [f"{p}_ctx2"], name=f"{p}_ctx_merge"),
                  helper.make_node("MatMul", [f"{p}_ctx2", w(f"{p}_wo", (hidden, hidden), std)], [f"{p}_o"],
                                   name=f"{p}_o_proj"),
                  helper.make_node("Add", [h, f"{p}_o"], [f"{p}_h1"], name=f"{p}_residual1")]
        n2 = rmsnorm(f"{p}_h1", f"{p}_post_norm")
        nodes += [helper.make_node("MatMul", [n2, w(f"{p}_wg", (hidden, ffn), std)], [f"{p}_gate"], name=f"{p}_gate"),
                  helper.make_node("Sigmoid", [f"{p}_gate"], [f"{p}_sig"], name=f"{p}_sigmoid"),
                  helper.make_node("Mul", [f"{p}_gate", f"{p}_sig"], [f"{p}_silu"], name=f"{p}_silu"),
                  helper.make_node("MatMul", [n2, w(f"{p}_wu", (hidden, ffn), std)], [f"{p}_up"], name=f"{p}_up"),
                  helper.make_node("Mul", [f"{p}_silu", f"{p}_up"], [f"{p}_act"], name=f"{p}_swiglu"),
                  helper.make_node("MatMul", [f"{p}_act", w(f"{p}_wd", (ffn, hidden), 1 / np.sqrt(ffn))], [f"{p}_down"],
                                   name=f"{p}_down"),
                  helper.make_node("Add", [f"{p}_h1", f"{p}_down"], [f"h_{li + 1}"], name=f"{p}_residual2")]
        h = f"h_{li + 1}"
    final = rmsnorm(h, "final_norm")
    nodes.append(helper.make_node("MatMul", [final, w("lm_head", (hidden, vocab), std)], ["logits"], name="lm_head"))
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])
    return _model(nodes, "decoder_llm", [ids], [("logits", [1, tokens, vocab])], inits)


def token_ids(tokens: int, vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (1, tokens)).astype(np.int64)


def deconv_bn_relu_net(*, cin: int = 4, cout: int = 8, size: int = 8, kernel: int = 2, seed: int = 0,
                       conv: bool = False) -> onnx.ModelProto:
    """x → ConvTranspose(+bias) → BatchNormalization → Relu → Conv 3x3 → y: MNN fuses the first three into one
    Deconvolution with a fused ReLU (``conv``: a strided Conv instead, fused into one Convolution)."""
    rng = np.random.default_rng(seed)
    inits = [_f32("dw", rng.normal(0, np.sqrt(2 / (cin * kernel * kernel)), (cin, cout, kernel, kernel))),
             _f32("db", rng.normal(0, 0.2, cout)),
             _f32("bn_s", rng.uniform(0.5, 1.5, cout)), _f32("bn_b", rng.normal(0, 0.3, cout)),
             _f32("bn_m", rng.normal(0, 0.2, cout)), _f32("bn_v", rng.uniform(0.5, 1.5, cout)),
             _f32("cw", rng.normal(0, np.sqrt(2 / (cout * 9)), (cin, cout, 3, 3))), _f32("cb", rng.normal(0, 0.1, cin))]
    if conv:
        inits[0] = _f32("dw", rng.normal(0, np.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)))
        first = helper.make_node("Conv", ["x", "dw", "db"], ["up"], name="up", pads=[1, 1, 1, 1])
    else:
        first = helper.make_node("ConvTranspose", ["x", "dw", "db"], ["up"], name="up", strides=[kernel, kernel])
    out_size = size if conv else size * kernel
    nodes = [first,
             helper.make_node("BatchNormalization", ["up", "bn_s", "bn_b", "bn_m", "bn_v"], ["up_bn"], name="up_bn"),
             helper.make_node("Relu", ["up_bn"], ["up_relu"], name="up_relu"),
             helper.make_node("Conv", ["up_relu", "cw", "cb"], ["y"], name="head", pads=[1, 1, 1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])
    return _model(nodes, "deconv_bn_relu", [x], [("y", [1, cin, out_size, out_size])], inits)
