"""Held-out check of the hard-numerics verdicts (run by hand: ``python tests/numerics_accuracy.py``).

The thresholds in compare/overflow.py, compare/quant_detect.py, compare/drift.py and thresholds.output_ok_db were
set while building the cases in tests/test_numerics_*.py (the in-sample set). These cases are other models, sizes,
magnitudes and encodings, never used to pick a number; the script prints expected vs got per case and the totals.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))

from onnx import TensorProto, helper, numpy_helper

from doubles.htp_dump import write_htp_dump
from numerics_models import decoder_llm, deconv_bn_relu_net, l2norm_net, pixels, token_ids
from qnn_debug.baseline import run_baseline
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.diagnose import diagnose
from qnn_debug.dump import run_dump
from qnn_debug.examples import deep_conv_net
from qnn_debug.inject import inject
from qnn_debug.onnx_graph import mark_all
from qnn_debug.runstore import load_run
from qnn_debug.targets import DumpRequest
from quant_models import activation_points, quantize, shrink_encoding


def attention_logits_net(tokens: int = 16, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    """h [1,T,H] with LLM-sized outliers → q = h·Wq, k = h·Wk → q·kᵀ → Softmax → ·h: the logits overflow fp16."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.normal(0, 1, (hidden, hidden)) * 0.5).astype(np.float32), n) for n in ("wq", "wk")]
    nodes = [helper.make_node("MatMul", ["h", "wq"], ["q"], name="q"), helper.make_node("MatMul", ["h", "wk"], ["k"], name="k"),
             helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["logits"], name="qk"),
             helper.make_node("Softmax", ["logits"], ["att"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["att", "h"], ["out"], name="att_v")]
    g = helper.make_graph(nodes, "att", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, tokens, hidden])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, tokens, hidden])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _h(tokens: int = 16, hidden: int = 64, big: float = 300.0) -> np.ndarray:
    h = np.random.default_rng(5).normal(0, 1, (1, tokens, hidden)).astype(np.float32)
    h[..., [3, 9]] = big
    return h


def fp16_case(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> Callable[[Path], tuple]:
    def run(d: Path) -> tuple:
        onnx.save(model, str(d / "m.onnx"))
        np.savez(d / "in.npz", **inputs)
        r = diagnose(d / "m.onnx", d / "diag", inputs=d / "in.npz", mnn_gate=False).compare
        return r.verdict.kind, r.verdict.pattern, r.first_failing.op if r.first_failing else None
    return run


def quant_case(bits: int, blocks: int, ch: int, size: int, what: str, factor: float = 4.0) -> Callable[[Path], tuple]:
    def run(d: Path) -> tuple:
        rng = np.random.default_rng(11)
        x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        np.savez(d / "in.npz", x=x)
        cal = [x] + [x + 0.1 * rng.standard_normal(x.shape).astype(np.float32) for _ in range(2)]
        fm = deep_conv_net(blocks=blocks, channels=ch, size=size, seed=4)
        q = quantize(fm, d / "qdq.onnx", bits, calibration=cal)
        run_baseline(q, d / "base", inputs=d / "in.npz", mnn_gate=False)
        target, expect_at = q, None
        if what.startswith("shrink"):
            tensor = activation_points(onnx.load(str(q)))[int(what[6:])]
            onnx.save(shrink_encoding(onnx.load(str(q)), tensor, factor), str(d / "t.onnx"))
            target, expect_at = d / "t.onnx", tensor
        elif what != "healthy":
            kind, node = what.split(":")
            target = quantize(inject(fm, kind, node), d / "t.onnx", bits, calibration=cal)
        run_dump(DumpRequest(model=target, out=d / "htp", precision="quantized", inputs=d / "in.npz"))
        run = load_run(d / "htp")
        np.savez(d / "t.npz", **{t.name: np.asarray(run.array(t.name)) for t in run.tensors})
        r = compare_paths(d / "base", d / "t.npz")
        ff = r.first_failing
        if ff is not None and expect_at is not None:
            return r.verdict.kind, r.verdict.pattern, "=shrunk" if ff.tensor == expect_at else ff.tensor
        return r.verdict.kind, r.verdict.pattern, ff.op if ff else None
    return run


def fused_case(cin: int, cout: int, size: int, kernel: int, conv: bool) -> Callable[[Path], tuple]:
    def run(d: Path) -> tuple:
        import onnxruntime as ort

        model = deconv_bn_relu_net(cin=cin, cout=cout, size=size, kernel=kernel, conv=conv, seed=9)
        onnx.save(model, str(d / "m.onnx"))
        x = np.random.default_rng(2).standard_normal((1, cin, size, size)).astype(np.float32)
        np.savez(d / "in.npz", x=x)
        run_baseline(d / "m.onnx", d / "base", inputs=d / "in.npz")
        buggy = onnx.ModelProto()
        buggy.CopyFrom(model)
        for n in buggy.graph.node:
            if n.name == "up_relu":
                n.op_type = "Identity"
        m = mark_all(buggy)
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        write_htp_dump(d / "dump", sorted((d / "base" / "mnn_cpu").glob("*.mnn"))[0],
                       {"x": x, **dict(zip(names, s.run(names, {"x": x}), strict=True))})
        r = compare_paths(d / "base", d / "dump")
        return r.verdict.kind, r.verdict.pattern, r.first_failing.op_type if r.first_failing else None
    return run


CASES: list[tuple[str, Callable[[Path], tuple], tuple]] = [
    ("decoder h96 L3 outliers 2500", fp16_case(decoder_llm(hidden=96, layers=3, tokens=24, big_value=2500.0,
                                                           big_channels=(5, 50)), {"ids": token_ids(24, 96, 3)}),
     ("precision", "fp16_range", "l0_in_norm_pow")),
    ("decoder h64 L2 outliers 150 (fp16-safe)", fp16_case(decoder_llm(hidden=64, layers=2, big_value=150.0),
                                                         {"ids": token_ids(16, 96, 4)}), ("*", "none", None)),
    ("l2norm conv 4ch 40px channel", fp16_case(l2norm_net(variant="channel", channels=4, size=40, conv=True, seed=2),
                                              {"x": pixels(4, 40, 2)}), ("precision", "fp16_range", "sumsq")),
    ("l2norm pow 2ch 20px rescaled", fp16_case(l2norm_net(variant="pow", channels=2, size=20, scale=1 / 256),
                                              {"x": pixels(2, 20, 3)}), ("ok", "none", None)),
    ("attention logits overflow", fp16_case(attention_logits_net(), {"h": _h()}), ("precision", "fp16_range", "qk")),
    ("deep conv 8 blocks healthy fp16", fp16_case(deep_conv_net(blocks=8, channels=16, size=16, seed=6),
                                                 {"x": np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)}),
     ("ok", "none", None)),
    ("A8W8 6 blocks 8ch 24px healthy", quant_case(8, 6, 8, 24, "healthy"), ("quantization", "none", None)),
    ("A8W8 6 blocks shrink late x4", quant_case(8, 6, 8, 24, "shrink7"), ("quantization", "encoding_range", "=shrunk")),
    ("A8W8 6 blocks shrink x2", quant_case(8, 6, 8, 24, "shrink4", 2.0), ("quantization", "encoding_range", "=shrunk")),
    ("A16W8 4 blocks 16ch healthy", quant_case(16, 4, 16, 16, "healthy"), ("quantization", "none", None)),
    ("A16W8 4 blocks shrink x4", quant_case(16, 4, 16, 16, "shrink5"), ("quantization", "encoding_range", "=shrunk")),
    ("A8W8 scale bug at b3_conv", quant_case(8, 6, 8, 24, "scale_output:b3_conv"), ("real_bug", "*", "b3_conv")),
    ("fused Deconvolution 8->4 k2 10px", fused_case(8, 4, 10, 2, False), ("real_bug", "fused_activation_dropped", "Deconvolution")),
    ("fused Convolution 4->8 12px", fused_case(4, 8, 12, 1, True), ("real_bug", "fused_activation_dropped", "Convolution")),
]


def main() -> int:
    hits = 0
    t0 = time.monotonic()
    for name, fn, want in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                got = fn(Path(tmp))
            except Exception as e:  # a case that cannot run is a miss, with the reason
                got = ("error", type(e).__name__, str(e)[:80])
        ok = want[0] in ("*", got[0]) and (want[1] == "*" or got[1] == want[1]) and got[2] == want[2]
        hits += ok
        print(f"{'ok  ' if ok else 'MISS'} {name}: expected {want}, got {got}", flush=True)
    print(f"held-out: {hits}/{len(CASES)} right in {time.monotonic() - t0:.0f} s")
    return 0 if hits == len(CASES) else 1


if __name__ == "__main__":
    raise SystemExit(main())
