"""Verdicts and advice on the HTP simulator, through the CLI: a healthy decoder is ``ok``, an fp16 overflow is
``precision``/``fp16_range`` with a rescale sized from the largest value of the scale-invariant region, the
tensor table agrees with the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from diagnose_cli import diagnose_cli
from next_steps_check import check_steps
from qnn_debug.cli import app
from qnn_debug_testkit.tiny_graph import TinyQwen3Config, build_graph, make_weights, prefill_inputs

runner = CliRunner()




def _decoder(layers: int, hidden: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The tiny Qwen3-shaped decoder, clean, with its logits index baked in (QNN rejects the dynamic Slice)."""
    cfg = TinyQwen3Config(layers=layers, hidden=hidden, intermediate=2 * hidden)
    w = make_weights(cfg)
    feeds = prefill_inputs(cfg, w, [int(i) for i in np.random.default_rng(layers).integers(0, 256, size=32)])
    m = build_graph(cfg, w, seq_len=32)
    index = feeds.pop("logits_index")
    keep = [i for i in m.graph.input if i.name != "logits_index"]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.append(numpy_helper.from_array(index, "logits_index"))
    return m, feeds


@pytest.mark.parametrize(("layers", "hidden"), [(2, 128), (3, 64)])
def test_a_healthy_decoder_on_the_simulator_is_ok(tmp_path: Path, layers: int, hidden: int):
    """Measured: logits ~46-48 dB against a ~55 dB floor, top-1 agreeing, a LUT Sigmoid ~12.5 dB below the floor
    with no jump: that is fp16 accumulation, not a precision problem (it used to say precision, 0.75)."""
    model, feeds = _decoder(layers, hidden)
    c = diagnose_cli(tmp_path, "dec", model, feeds)["compare"]
    v = c["verdict"]
    assert v["kind"] == "ok" and c["first_failing"] is None, v["summary"]
    logits = v["evidence"]["end_to_end"]["logits"]
    assert logits["top1_agree"] == logits["top1_positions"] >= 1
    assert logits["floor_sqnr_db"] - logits["sqnr_db"] < 10.0
    assert v["evidence"]["worst_excess"]["excess_db"] >= 10.0  # the case the old rule called precision
    assert "Healthy" in v["summary"] and "top-1" in v["summary"]
    assert c["next_steps"] == []


def _rmsnorm_sum_form(hidden: int, tokens: int, big: float) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """An RMSNorm written as Sqrt(ReduceSum(x*x)/H + eps) on a residual stream with massive activations (a few
    channels at ``big``), projected and added back: the square leaves the range first, its sum goes furthest."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(hidden)
    f = lambda name, a: numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)  # noqa: E731
    inits = [f("inv_h", 1.0 / hidden), f("eps", 1e-6), f("gamma", rng.uniform(0.5, 1.5, hidden)),
             f("w", rng.normal(0, hidden ** -0.5, (hidden, hidden))),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")]
    nodes = [helper.make_node("Mul", ["h", "h"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], name="sumsq", keepdims=1),
             helper.make_node("Mul", ["sumsq", "inv_h"], ["ms"], name="mean"),
             helper.make_node("Add", ["ms", "eps"], ["ms_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["ms_eps"], ["rms"], name="rms"),
             helper.make_node("Div", ["h", "rms"], ["unit"], name="normalize"),
             helper.make_node("Mul", ["unit", "gamma"], ["normed"], name="gamma_mul"),
             helper.make_node("MatMul", ["normed", "w"], ["proj"], name="proj"),
             helper.make_node("Add", ["h", "proj"], ["out"], name="residual")]
    graph = helper.make_graph(nodes, "rmsnorm_sum", [helper.make_tensor_value_info("h", TensorProto.FLOAT,
                                                                                   [1, tokens, hidden])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, tokens, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    h = rng.normal(0, 1, (1, tokens, hidden)).astype(np.float32)
    h[..., [3, hidden // 2, hidden - 5]] = big * rng.choice([-1.0, 1.0], size=(1, tokens, 3))
    return model, {"h": h}


def _scale_input(model: onnx.ModelProto, source: str, readers: list[str], k: int) -> onnx.ModelProto:
    """The advice applied as printed: one Mul(source, 2^-k) feeding the readers inside the norm; eps by 2^-2k."""
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.name in readers:
            node.input[:] = [f"{source}_scaled" if i == source else i for i in node.input]
    out.graph.node.insert(0, helper.make_node("Mul", [source, "rescale"], [f"{source}_scaled"], name="rescale"))
    out.graph.initializer.append(numpy_helper.from_array(np.array(2.0 ** -k, dtype=np.float32), "rescale"))
    for init in out.graph.initializer:
        if init.name == "eps":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(4.0 ** -k), "eps"))
    return out


def _fold_into_conv(model: onnx.ModelProto, k: int) -> onnx.ModelProto:
    """The advice applied as printed: 2^-k folded into the Conv's W and B."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name in ("cw", "cb"):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(2.0 ** -k), init.name))
    return out


def _fp16_range(c: dict) -> dict:
    v = c["verdict"]
    assert (v["kind"], v["pattern"]) == ("precision", "fp16_range"), v["summary"]
    assert "nan_inf" not in json.dumps(v)  # values saturate at 131008: nothing is NaN or inf
    first = [t for t in c["tensors"] if (t.get("stands_for") or t["name"]) == c["first_failing"]["tensor"]]
    assert first and all(t["status"] == "bad" and (t["excess_db"] or 0.0) > 10.0 for t in first), first
    return v["evidence"]["fp16_range"]


@pytest.mark.parametrize(("size", "gain"), [(16, 2.0), (12, 1.6)])
def test_l2norm_rescale_is_sized_from_the_sum_and_folded_into_the_conv(tmp_path: Path, size: int, gain: float):
    """x*x leaves the range first (feat ~ 2x pixels, squares beyond 131008); its sum over C,H,W goes ~280x further
    (measured at size 16: square 3.1e5, sum 8.6e7). The old advice sized 2^-3 from the square, which left the sum
    at 1.3e6; it is now 2^-7, and folding that into the Conv makes the run ok."""
    from numerics_models import l2norm_net, pixels

    model = l2norm_net(variant="global", conv=True, size=size)
    x = {"x": pixels(3, size) * np.float32(gain)}
    c = diagnose_cli(tmp_path, "l2", model, x)["compare"]
    ev = _fp16_range(c)
    assert c["first_failing"]["op"] == "square"
    assert ev["region_max_tensor"] == "sumsq" and ev["region_max_abs"] > 100 * ev["reference_max_abs"]
    k = ev["rescale_exponent"]
    assert ev["region_max_abs"] * 4.0 ** -k * 4 <= 65504  # the sum fits, with the 4x margin
    assert ev["rescale_producer"] == "mix" and ev["rescale_uses_outside"] == []
    check_steps(c["next_steps"])
    why = c["next_steps"][1]["why"]  # the hand-made rescale, after the tool's own (sized over the whole range)
    assert "fold 2^-K into mix's weights (Conv: multiply W and B by 2^-K)" in why and "`sumsq`" in why
    assert f"K at least {k}: 2^-{k} is what this sample alone needs" in why
    after = ev["region_max_abs"] * 4.0 ** -k  # the headroom said is the measured one, not the design's 4
    assert f"a factor {65504.0 / after:.3g} inside fp16's 65504" in why
    fix = c["next_steps"][0]  # the tool writes and proves that rescale (skill step 6)
    assert fix["tool"] == "fix_and_prove" and fix["cli"] == 'qnn-debug fix "$THIS_RESULT" --input-range "$INPUT_RANGE"'
    # The table row of the first failing tensor: its floor fails too, so its excess is from the fp16 level and
    # the words say so (not "56 dB below the fp16 floor (1.9 dB)" when the target is above that floor).
    table = runner.invoke(app, ["compare", str(tmp_path / "l2" / "baseline"), str(tmp_path / "l2" / "htp-sim"),
                                "--model", str(tmp_path / "l2.onnx")])
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if line.strip().startswith("1 sq "))
    assert "dB below the 60 dB fp16 level (the floor fails here too:" in row and row.endswith(", bad"), row
    fixed = diagnose_cli(tmp_path, "l2_fixed", _fold_into_conv(model, k), x)["compare"]["verdict"]
    assert fixed["kind"] == "ok", fixed["summary"]


@pytest.mark.parametrize(("hidden", "big"), [(64, 1500.0), (96, 900.0)])
def test_rmsnorm_rescale_feeds_only_the_norm_and_fits_its_sum(tmp_path: Path, hidden: int, big: float):
    model, feeds = _rmsnorm_sum_form(hidden, 16, big)
    c = diagnose_cli(tmp_path, "rms", model, feeds)["compare"]
    ev = _fp16_range(c)
    assert c["first_failing"]["op"] == "square" and ev["region_max_tensor"] == "sumsq"
    k = ev["rescale_exponent"]
    assert ev["region_max_abs"] * 4.0 ** -k * 4 <= 65504
    assert sorted(ev["rescale_uses_inside"]) == ["normalize", "square"] and ev["rescale_uses_outside"] == ["residual"]
    check_steps(c["next_steps"])
    why = c["next_steps"][1]["why"]
    assert "insert one Mul(`h`, 2^-K)" in why and "residual keep reading the unscaled `h`" in why and f"2^-{k}" in why
    fixed = diagnose_cli(tmp_path, "rms_fixed", _scale_input(model, "h", ["square", "normalize"], k), feeds)["compare"]
    assert fixed["verdict"]["kind"] == "ok", fixed["verdict"]["summary"]


def _rss_model(kind: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A norm written with ReduceSumSquare: an L2-norm over channels on 2x raw pixels, or an RMSNorm over the last
    axis of a residual stream with massive activations. MNN's converter lowers ReduceSumSquare to a square and a sum."""
    from onnx import TensorProto, helper

    from numerics_models import pixels

    f = lambda name, a: numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)  # noqa: E731
    if kind == "l2":
        shape, axis, x = [1, 3, 16, 16], 1, pixels(3, 16) * np.float32(2.0)
        scale = 1.0
    else:
        shape, axis = [1, 16, 64], -1
        x = np.random.default_rng(3).normal(0, 1, shape).astype(np.float32)
        x[..., [5, 30, 61]] = 1200.0
        scale = 1.0 / 64
    nodes = [helper.make_node("ReduceSumSquare", ["x"], ["ss"], name="sumsq", keepdims=1, axes=[axis]),
             helper.make_node("Mul", ["ss", "scale"], ["ms"], name="mean"),
             helper.make_node("Add", ["ms", "eps"], ["ms_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["ms_eps"], ["norm"], name="norm"),
             helper.make_node("Div", ["x", "norm"], ["y"], name="normalize")]
    graph = helper.make_graph(nodes, f"rss_{kind}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [f("scale", scale), f("eps", 1e-6)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), {"x": x}


@pytest.mark.parametrize("kind", ["l2", "rmsnorm"])
def test_mnn_dump_locates_the_overflow_at_the_square_mnn_lowered_reduce_sum_square_into(tmp_path: Path, kind: str):
    """The MNN dump holds the square MNN made of ReduceSumSquare (a tensor the ONNX model does not have); it is the
    first to sit at the 131008 rail. The answer names that MNN tensor and op, and the ONNX node it came from.
    Values: the HTP simulator's own run of the same model (which runs ReduceSumSquare as ReduceSum(Mul(x, x)))."""
    from doubles.htp_dump import write_htp_dump
    from qnn_debug.baseline import run_baseline
    from qnn_debug.dump import run_dump
    from qnn_debug.mnn.model_reader import read_mnn_model
    from qnn_debug.runstore import load_run
    from qnn_debug.targets import DumpRequest

    model, feeds = _rss_model(kind)
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", **feeds)
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz")
    run_dump(DumpRequest(model=tmp_path / "m.onnx", out=tmp_path / "htp", inputs=tmp_path / "in.npz"))
    sim = load_run(tmp_path / "htp")
    mnn_path = sorted((tmp_path / "base" / "mnn_cpu").glob("*.mnn"))[0]
    mnn = read_mnn_model(mnn_path)
    by_output = {mnn.tensor_names[o]: op for op in mnn.ops for o in op.outputs}
    square = mnn.tensor_names[by_output["ss"].inputs[0]]  # what feeds MNN's sum: its square
    assert square not in {t.name for t in sim.tensors}
    values = {t.name: np.asarray(sim.array(t.name)) for t in sim.tensors if "/" not in t.name}
    values[square] = np.asarray(sim.array("ss/square"))
    write_htp_dump(tmp_path / "dump", mnn_path, values)
    res = runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v, ff = out["verdict"], out["first_failing"]
    assert (v["kind"], v["pattern"]) == ("precision", "fp16_range"), v["summary"]
    assert ff["target_tensor"] == square and ff["op"] == by_output[square].name
    assert (ff["model_op"], ff["model_op_type"]) == ("sumsq", "ReduceSumSquare") and ff["tensor"] == "ss"
    inner = v["evidence"]["fp16_range"]["inside_op"]
    assert inner["target_tensor"] == square and inner["target_at_rail"] > 0
    assert v["summary"].index(f"`{square}`") < v["summary"].index("`ss`"), v["summary"]
    assert "the target's own stage of sumsq (ReduceSumSquare" in v["summary"]
    check_steps(out["next_steps"])
    # the row in words a reader can follow to the file: the MNN op, its t<N> and the dump file holding it
    n = mnn.tensor_index(square)
    assert ff["dump_tensor"] == f"t{n}" and Path(ff["dump_file"]).name.endswith(f"_t{n}.raw"), ff
    assert Path(ff["dump_file"]).is_file()
    line = next(ln for ln in runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump")]).stdout
                .splitlines() if ln.startswith("first failing:"))
    assert "the model's tensor 'ss' (made by ONNX ReduceSumSquare sumsq)" in line, line
    assert f"at MNN op {by_output[square].name!r} ({by_output[square].type_name})" in line, line
    assert f"in the dump it is t{n}: file {ff['dump_file']}" in line, line
    runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--report", str(tmp_path / "rep")])
    assert f"In the target's dump it is `t{n}`: `{ff['dump_file']}`" in (tmp_path / "rep" / "compare.md").read_text()


def _rope_fault(model: onnx.ModelProto, layer: int, fault: str) -> onnx.ModelProto:
    """The decoder with one layer's q rotary computed in a layout real ports get wrong (names kept)."""
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    scope = f"/layers.{layer}/self_attn/rotary_q"
    nodes = {n.name: n for n in out.graph.node}
    concat, x = nodes[f"{scope}/Concat"], nodes[f"{scope}/Slice"].input[0]
    extra: list[onnx.NodeProto] = []
    if fault == "interleaved":
        ints = {f"{scope}/t_{k}": v for k, v in {"0": [0], "1": [1], "big": [1 << 30], "ax": [-1], "two": [2]}.items()}
        out.graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items())
        t = lambda k: f"{scope}/t_{k}"  # noqa: E731
        extra = [helper.make_node("Slice", [x, t("0"), t("big"), t("ax"), t("two")], [f"{scope}/even"]),
                 helper.make_node("Slice", [x, t("1"), t("big"), t("ax"), t("two")], [f"{scope}/odd"]),
                 helper.make_node("Neg", [f"{scope}/odd"], [f"{scope}/odd_neg"]),
                 helper.make_node("Unsqueeze", [f"{scope}/odd_neg", t("ax")], [f"{scope}/u0"]),
                 helper.make_node("Unsqueeze", [f"{scope}/even", t("ax")], [f"{scope}/u1"]),
                 helper.make_node("Concat", [f"{scope}/u0", f"{scope}/u1"], [f"{scope}/pairs"], axis=-1),
                 helper.make_node("Shape", [x], [f"{scope}/x_shape"]),
                 helper.make_node("Reshape", [f"{scope}/pairs", f"{scope}/x_shape"], [concat.output[0]])]
        out.graph.node.remove(concat)
    elif fault == "sign":
        extra = [helper.make_node("Neg", [nodes[f"{scope}/Slice"].output[0]], [f"{scope}/lo_neg"])]
        concat.input[:] = [nodes[f"{scope}/Slice_1"].output[0], f"{scope}/lo_neg"]
    elif fault == "neg_lost":
        concat.input[0] = nodes[f"{scope}/Slice_1"].output[0]
    elif fault == "split":  # the head split at a quarter: Concat(-x[q:], x[:q])
        q = int(numpy_helper.to_array(next(i for i in out.graph.initializer if i.name == f"{scope}/e0"))[0]) // 2
        for init in out.graph.initializer:
            if init.name in (f"{scope}/e0", f"{scope}/s1"):
                init.CopyFrom(numpy_helper.from_array(np.array([q], np.int64), init.name))
    elif fault == "cos_sin":
        mul, mul1 = nodes[f"{scope}/Mul"], nodes[f"{scope}/Mul_1"]
        mul.input[1], mul1.input[1] = mul1.input[1], mul.input[1]
    at = next(i for i, n in enumerate(out.graph.node) if n.name == f"{scope}/Neg")
    for k, n in enumerate(extra):
        out.graph.node.insert(at + 1 + k, n)
    return out


@pytest.fixture(scope="module", params=[(2, 128), (3, 64)])
def rope_base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, onnx.ModelProto]:
    from qnn_debug.baseline import run_baseline

    layers, hidden = request.param
    d = tmp_path_factory.mktemp(f"rope{layers}")
    cfg = TinyQwen3Config(layers=layers, hidden=hidden, intermediate=2 * hidden)
    w = make_weights(cfg)
    feeds = prefill_inputs(cfg, w, [int(i) for i in np.random.default_rng(layers).integers(0, 256, size=8)])
    model = build_graph(cfg, w, seq_len=8)
    onnx.save(model, str(d / "llm.onnx"))
    np.savez(d / "in.npz", **feeds)
    run_baseline(d / "llm.onnx", d / "base", inputs=d / "in.npz", mnn_gate=False)
    return d, model


ROPE_FAULTS = {"interleaved": ("Concat", "pairs taken interleaved"), "sign": ("Concat", "sign on the other half"),
               "neg_lost": ("Concat", "Neg lost"), "split": ("Concat", "head split at"),
               "cos_sin": ("Mul", "cos and sin swapped")}


@pytest.mark.parametrize("fault", list(ROPE_FAULTS))
def test_a_wrong_rotary_layout_is_named_by_its_pattern_trial(rope_base: tuple[Path, onnx.ModelProto], fault: str):
    """Targets are the decoder run (ORT CPU, every tensor) with one layer's rotary in another layout; compare names
    the layout, and every rotary trial reports its SQNR."""
    import onnxruntime as ort

    from qnn_debug.onnx_graph import mark_all

    d, model = rope_base
    layer = 1
    bad = mark_all(_rope_fault(model, layer, fault))
    sess = ort.InferenceSession(bad.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = dict(np.load(d / "in.npz"))
    names = [o.name for o in sess.get_outputs()]
    np.savez(d / f"{fault}.npz", **feeds, **dict(zip(names, sess.run(names, feeds), strict=True)))
    res = runner.invoke(app, ["compare", str(d / "base"), str(d / f"{fault}.npz"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v, ff = out["verdict"], out["first_failing"]
    op_type, words = ROPE_FAULTS[fault]
    assert (v["kind"], v["pattern"]) == ("real_bug", "rotary_layout"), v["summary"]
    assert ff["op_type"] == op_type and ff["op"].startswith(f"/layers.{layer}/self_attn/rotary_q/")
    assert words in v["evidence"]["pattern_variant"] and v["evidence"]["pattern_sqnr_db"] > 60
    rotary = [t for t in v["evidence"]["trials"] if t["pattern"] == "rotary_layout"]
    assert rotary and all(t["sqnr_db"] is not None for t in rotary)
    assert "rotary embedding with" in v["summary"]
    check_steps(out["next_steps"])



@pytest.mark.parametrize(("positions", "width", "gap"), [(8, 512, 0.03), (4, 1024, 0.05)])
def test_a_flipped_top1_is_not_ok_even_when_the_output_is_at_its_floor(tmp_path: Path, positions: int, width: int,
                                                                       gap: float):
    """Logits whose best two tokens at one position are 1-2 % apart (far more than fp16 resolves) and a target that
    swaps them: every tensor is at the floor (SQNR > 55 dB), the answer is not — precision, with the miss counted;
    the unswapped run is ok."""
    from onnx import TensorProto, helper

    from qnn_debug.baseline import run_baseline

    x = np.clip(np.random.default_rng(width).normal(0, 1, (1, positions, width)), -2.5, 2.5).astype(np.float32)
    x[0, 0, :2] = [3.0, 3.0 - gap]
    graph = helper.make_graph([helper.make_node("Mul", ["x", "one"], ["logits"], name="head")], "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, list(x.shape))],
                              [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=x)
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz", mnn_gate=False)
    flipped = x.copy()
    flipped[0, 0, :2] = flipped[0, 0, 1::-1]
    np.savez(tmp_path / "same.npz", x=x, logits=x)
    np.savez(tmp_path / "flip.npz", x=x, logits=flipped)
    same = json.loads(runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "same.npz"),
                                          "--json"]).stdout)
    assert same["verdict"]["kind"] == "ok", same["verdict"]["summary"]
    res = runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "flip.npz"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v, e2e = out["verdict"], out["verdict"]["evidence"]["end_to_end"]["logits"]
    assert e2e["sqnr_db"] > 55.0
    assert v["kind"] == "precision", v["summary"]
    assert (e2e["top1_agree"], e2e["top1_positions"]) == (positions - 1, positions)
    assert "top-1 differs from the reference's at 1 of" in v["summary"]
    check_steps(out["next_steps"])


def test_halves_where_the_model_pairs_interleaved_is_named_too(rope_base: tuple[Path, onnx.ModelProto]):
    """The reverse: the model's rotary pairs x[2i], x[2i+1] (rotate_every_two) in one layer, the target pairs halves."""
    import onnxruntime as ort

    from qnn_debug.baseline import run_baseline
    from qnn_debug.onnx_graph import mark_all

    d, model = rope_base
    onnx.save(_rope_fault(model, 1, "interleaved"), str(d / "pairs.onnx"))
    run_baseline(d / "pairs.onnx", d / "pairs_base", inputs=d / "in.npz", mnn_gate=False, force=True)
    sess = ort.InferenceSession(mark_all(model).SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = dict(np.load(d / "in.npz"))
    names = [o.name for o in sess.get_outputs()]
    np.savez(d / "halves.npz", **feeds, **dict(zip(names, sess.run(names, feeds), strict=True)))
    res = runner.invoke(app, ["compare", str(d / "pairs_base"), str(d / "halves.npz"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v, ff = out["verdict"], out["first_failing"]
    assert (v["kind"], v["pattern"]) == ("real_bug", "rotary_layout"), v["summary"]
    assert ff["op_type"] == "Reshape" and "pairs taken as halves" in v["evidence"]["pattern_variant"]
    assert v["evidence"]["pattern_sqnr_db"] > 60
    check_steps(out["next_steps"])
