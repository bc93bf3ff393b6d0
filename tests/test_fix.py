"""``fix``: the fixed artefact for a verdict, written next to the model and proven, through the CLI and the MCP
tool, on the project's own models — L2-norm on raw pixels (the scale folded into a Conv, or a Mul on the graph
input), an LLM-shaped decoder whose RMSNorms overflow on outlier channels (five places), a sum of squares no
normalisation closes (no exact fix: said so, nothing written) and an MNN test dir whose input was not copied."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from diagnose_cli import diagnose_cli
from doubles.htp_dump import write_htp_dump
from numerics_models import decoder_llm, deconv_bn_relu_net, l2norm_net, pixels, token_ids
from qnn_debug.cli import app
from qnn_debug.fix.intervals import propagate
from test_mcp_support import connect, error_text, ok

runner = CliRunner()


def _diagnose(folder: Path, name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> Path:
    assert diagnose_cli(folder, name, model, inputs)["compare"]["verdict"]["kind"] == "precision"
    return folder / name


def _fix(*args: str) -> tuple[int, dict]:
    res = runner.invoke(app, ["fix", *args, "--json"])
    return res.exit_code, json.loads(res.stdout)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# (variant, conv, brightness of the sample): a dark sample shows what sizing from the sample alone would miss
L2_CASES = [("global", True, 1.0), ("pow", False, 0.3)]


@pytest.mark.parametrize(("variant", "conv", "light"), L2_CASES)
def test_l2norm_on_pixels_is_rescaled_exactly_and_proven_over_the_declared_range(tmp_path: Path, variant: str,
                                                                                  conv: bool, light: float):
    sample = np.round(pixels(3, 24) * light).astype(np.float32)
    diag = _diagnose(tmp_path, "l2", l2norm_net(variant=variant, conv=conv, channels=3, size=24), {"x": sample})
    advice = json.loads((diag / "report" / "compare.json").read_text())["verdict"]["evidence"]["fp16_range"]
    before = _sha(tmp_path / "l2.onnx")
    code, r = _fix(str(diag), "--input-range", "x=0:255", "--out", str(tmp_path / "fix"),
                   "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["kind"] == "fp16_rescale" and r["proven"], r["summary"]
    assert all(c["passed"] for c in r["proof"]) and len(r["proof"]) == 6
    # what the user ships: the fixed .mnn, gated on MNN CPU, beside the model (no .mnn of theirs is known here)
    shipped = r["mnn"]
    assert shipped["path"] == str(tmp_path / "l2.fp16-rescaled.mnn") and shipped["gate_passed"], shipped
    assert r["proof"][-1]["name"].startswith("the shipped .mnn") and "gate passed" in r["proof"][-1]["detail"]
    assert shipped["converter_flags"] == ["-f", "ONNX", "--bizCode", "MNN"] and "--optimizeLevel" in shipped["not_from_file"]
    assert "0 ulp" in r["proof"][0]["detail"]  # powers of two: bit-identical fp32 outputs
    # The proof's own simulator run skips the MNN gate (fp32 equivalence is proven above): no advice to the user
    # about a flag they never passed.
    assert not any("Reference not" in c["detail"] or "--no-mnn-gate" in c["detail"] for c in r["proof"]), r["proof"]
    assert r["before"]["verdict"] == "precision" and r["before"]["tensor"] == "sumsq"
    assert r["after"]["verdict"] == "ok" and r["after"]["tensor_sqnr_db"] > 40 > r["before"]["tensor_sqnr_db"]
    assert r["after"]["outputs_sqnr_db"]["y"] > 55 > r["before"]["outputs_sqnr_db"]["y"]
    (site,) = r["sites"]
    assert site["source"] == ("feat" if conv else "x") and site["bound_source"] == "interval"
    assert ("folded into Conv mix" in site["place"]) == conv and ("new Mul" in site["place"]) != conv
    assert site["worst_case_max"] > site["sample_max"] and site["after_max"] * 4 <= 65504
    # the all-255 image is a corner of the range, named so; the bound that sized the rescale is the interval bound
    assert site["corner"] == "x = 255 everywhere" and site["interval_bound"] == site["worst_case_max"]
    assert site["sample_max"] <= site["corner_max"] <= site["interval_bound"]
    assert not any("worst case" in c["name"] for c in r["proof"]) and any("corner input" in c["name"] for c in r["proof"])
    # sized over 0..255, not from the sample: the dark sample's own advice is smaller and would overflow there
    assert site["exponent"] >= advice["rescale_exponent"] + (1 if light < 1 else 0)
    fixed = Path(r["artefact"])
    assert fixed.parent == tmp_path and fixed.name == "l2.fp16-rescaled.onnx" and _sha(tmp_path / "l2.onnx") == before
    g = onnx.load(str(fixed)).graph  # the originals of the rescaled constants do not stay behind as dead weights
    read = {name for n in g.node for name in n.input}
    assert [t.name for t in g.initializer if t.name not in read] == []
    case = json.loads((tmp_path / "cases.jsonl").read_text().splitlines()[-1])
    assert case["category"] == "wrong_results_accuracy" and "'sumsq'" in case["match"]
    # a second fix never overwrites the first file
    first, first_mnn = _sha(fixed), _sha(Path(shipped["path"]))
    code, again = _fix(str(diag), "--input-range", "x=0:255", "--out", str(tmp_path / "fix2"),
                       "--cases", str(tmp_path / "cases.jsonl"))
    assert again["artefact"].endswith("l2.fp16-rescaled-2.onnx") and _sha(fixed) == first
    assert again["mnn"]["path"].endswith("l2.fp16-rescaled-2.mnn") and _sha(Path(shipped["path"])) == first_mnn
    assert again["case_file"] is None and len((tmp_path / "cases.jsonl").read_text().splitlines()) == 1  # once


def _with_reduce_sum_square(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same L2-norm with its x*x -> ReduceSum written as one ReduceSumSquare (the simulator refuses that op)."""
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = [n for n in m.graph.node if n.name != "square"]
    for n in nodes:
        if n.name == "sumsq":
            n.CopyFrom(helper.make_node("ReduceSumSquare", ["feat"], ["sumsq"], name="sumsq", keepdims=1, axes=[1, 2, 3]))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.checker.check_model(m)
    return m


def test_a_reduce_sum_square_model_is_rescaled_and_rewritten_for_the_simulator(tmp_path: Path):
    model = l2norm_net(variant="global", conv=True, channels=3, size=16)
    diag = _diagnose(tmp_path, "l2", model, {"x": pixels(3, 16)})  # the Mul+ReduceSum form runs on the simulator
    onnx.save(_with_reduce_sum_square(model), str(tmp_path / "l2rss.onnx"))
    code, r = _fix(str(diag), "--model", str(tmp_path / "l2rss.onnx"), "--input-range", "x=0:255",
                   "--out", str(tmp_path / "fix"), "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["proven"], r["summary"]
    assert "ReduceSumSquare rewritten as ReduceSum(Mul(x, x))" in r["summary"]
    exact, rewrite = r["proof"][:2]
    assert "0 ulp" in exact["detail"] and rewrite["name"].startswith("ReduceSumSquare") and rewrite["passed"]
    fixed = onnx.load(r["artefact"])
    assert "ReduceSumSquare" not in {n.op_type for n in fixed.graph.node} and r["after"]["verdict"] == "ok"
    assert r["sites"][0]["overflow_op"] == "sumsq" and "folded into Conv mix" in r["sites"][0]["place"]


def test_decoder_rmsnorms_with_outlier_channels_are_rescaled_in_place_of_each_norm(tmp_path: Path):
    diag = _diagnose(tmp_path, "dec", decoder_llm(hidden=64, layers=2, big_value=1500.0, tokens=16),
                     {"ids": token_ids(16, 96)})
    code, r = _fix(str(diag), "--out", str(tmp_path / "fix"), "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["proven"], r["summary"]
    sources = [s["source"] for s in r["sites"]]
    assert sources == ["h_0", "l0_h1", "h_1", "l1_h1", "h_2"]  # each norm's input; the residual keeps its values
    assert all("new Mul" in s["place"] and any("eps" in c for c in s["constants"]) for s in r["sites"])
    assert r["before"]["outputs_sqnr_db"]["logits"] < 0 < 55 < r["after"]["outputs_sqnr_db"]["logits"]
    assert r["after"]["tensor_sqnr_db"] > 60
    assert r["input_range"] == {}  # integer ids: the worst case is the sample
    assert (tmp_path / "cases.jsonl").is_file()


def _sum_of_squares_net() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["energy"], name="energy", keepdims=1)]
    graph = helper.make_graph(nodes, "energy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("energy", TensorProto.FLOAT, [1, 1, 1, 1])],
                              [numpy_helper.from_array(np.array([1, 2, 3], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_an_overflow_no_normalisation_closes_has_no_exact_fix_and_writes_nothing(tmp_path: Path):
    diag = _diagnose(tmp_path, "energy", _sum_of_squares_net(), {"x": pixels(3, 16)})
    res = runner.invoke(app, ["fix", str(diag), "--cases", str(tmp_path / "cases.jsonl"), "--json"])
    assert res.exit_code == 2 and "no exact place to rescale" in res.stdout
    assert not (tmp_path / "cases.jsonl").exists() and not list(tmp_path.glob("energy.fp16-rescaled*"))


def test_interval_bound_of_a_sum_of_squares_is_the_brightest_image():
    model = l2norm_net(variant="global", channels=3, size=8)
    shapes = {"x": (1, 3, 8, 8), "sq": (1, 3, 8, 8), "sumsq": (1, 1, 1, 1)}
    b = propagate(model, {"x": (0.0, 255.0)}, shapes)
    assert b["sumsq"] == (0.0, 3 * 64 * 255.0**2) and b["unit"] is not None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_fix_and_prove_through_the_mcp_tool(tmp_path: Path) -> None:
    _diagnose(tmp_path, "l2", l2norm_net(variant="global", conv=True, channels=3, size=16), {"x": pixels(3, 16)})
    _diagnose(tmp_path, "energy", _sum_of_squares_net(), {"x": pixels(3, 16)})
    async with connect(tmp_path, "auto") as client:
        answer = ok(await client.call_tool("fix_and_prove", {"result": "l2", "input_range": {"x": [0, 255]},
                                                             "background": False}))
        refused = error_text(await client.call_tool("fix_and_prove", {"result": "energy", "background": False}))
    r = answer["result"]
    assert answer["status"] == "succeeded" and r["proven"] and r["after"]["verdict"] == "ok"
    assert answer["summary"].startswith("PROVEN fp16_rescale fix")
    assert Path(r["artefact"]).parent == tmp_path.resolve() and Path(r["out"]).is_relative_to(tmp_path.resolve())
    assert "'sumsq'" in (tmp_path / "qnn-debug-cases.jsonl").read_text()
    assert "no exact place to rescale" in refused
    assert "'energy'" not in (tmp_path / "qnn-debug-cases.jsonl").read_text()


def _relu_lost(folder: Path, conv: bool, user_mnn: Path | None = None) -> Path:
    """A fused Deconvolution/Convolution head whose MNN QNN dump lost the ReLU (test double of MNN's dumper from
    ONNX Runtime values of the model without that Relu), compared: real_bug at the fused MNN op. ``user_mnn``: the
    user's own conversion (bizCode AcmeCam, --fp16 weights) is what ran and what the comparison names."""
    import onnxruntime as ort

    from qnn_debug.baseline import run_baseline
    from qnn_debug.onnx_graph import mark_all

    model = deconv_bn_relu_net(cin=4, cout=8, size=8, kernel=2, conv=conv)
    onnx.save(model, str(folder / "head.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.savez(folder / "in.npz", x=x)
    run_baseline(folder / "head.onnx", folder / "base", inputs=folder / "in.npz")
    buggy = onnx.ModelProto()
    buggy.CopyFrom(model)
    next(n for n in buggy.graph.node if n.name == "up_relu").op_type = "Identity"
    sess = ort.InferenceSession(mark_all(buggy).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = {"x": x, **dict(zip(names, sess.run(names, {"x": x}), strict=True))}
    mnn = sorted((folder / "base" / "mnn_cpu").glob("*.mnn"))[0]
    if user_mnn is not None:
        from qnn_debug.workers import run_worker

        run_worker("qnn_debug.workers.mnn_convert_worker", {"src": str(folder / "head.onnx"), "dst": str(user_mnn),
                                                             "biz_code": "AcmeCam", "flags": ["--fp16"]})
        mnn = user_mnn
    write_htp_dump(folder / "dump", mnn, values)
    res = runner.invoke(app, ["compare", str(folder / "base"), str(folder / "dump"), "--json",
                              str(folder / "compare.json"), *(["--mnn-model", str(mnn)] if user_mnn else [])])
    assert res.exit_code == 0, res.output
    return folder / "compare.json"


@pytest.mark.parametrize("conv", [False, True])
def test_relu_lost_by_a_fused_mnn_op_is_kept_out_of_the_fusion_and_proven_on_mnn_cpu(tmp_path: Path, conv: bool):
    ship = tmp_path / "app" / "assets"
    ship.mkdir(parents=True)
    result = _relu_lost(tmp_path, conv, user_mnn=ship / "head.mnn" if conv else None)
    code, r = _fix(str(result), "--out", str(tmp_path / "fix"), "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["kind"] == "fused_activation" and r["proven"], r["summary"]
    # the .mnn the user ships, beside theirs (converted with their bizCode) or, with none of theirs, beside the ONNX
    from qnn_debug.mnn.model_reader import read_mnn_model

    shipped = Path(r["mnn"]["path"])
    assert shipped == (ship / "head.relu-unfused.mnn" if conv else tmp_path / "head.relu-unfused.mnn")
    assert read_mnn_model(shipped).biz_code == ("AcmeCam" if conv else "MNN") and r["mnn"]["gate_passed"]
    from qnn_debug.mnn.weight_storage import weight_flags

    assert weight_flags(shipped) == (["--fp16"] if conv else [])  # their weights were stored in fp16: so are these
    assert ("--fp16" in r["mnn"]["converter_flags"]) == conv
    relu_out = read_mnn_model(shipped)
    assert relu_out.producer(relu_out.tensor_index("up_relu")).type_name == "BinaryOp"  # the fix is in the file shipped
    text = runner.invoke(app, ["fix", str(result), "--out", str(tmp_path / "fix2"), "--cases",
                               str(tmp_path / "cases.jsonl")]).stdout
    assert f"fixed file: {tmp_path / 'head.relu-unfused-2.onnx'}" in text and "fixed .mnn: " in text
    assert "head.relu-unfused-2.mnn" in text and (ship / "head.mnn").is_file() == conv  # theirs untouched
    # the proof's own simulator report stands on a gated reference: it does not open as untrusted
    md = (tmp_path / "fix" / "htp-sim" / "report" / "compare.md").read_text()
    assert "REFERENCE NOT TRUSTED" not in md
    op_type = "Convolution" if conv else "Deconvolution"
    assert r["before"]["verdict"] == "real_bug" and r["before"]["tensor"] == "up_relu"
    fp32, unfused, mnn_cpu, shipped_gate = r["proof"]
    assert shipped_gate["passed"] and ("weights stored --fp16 as yours" if conv else "gate passed") in shipped_gate["detail"]
    assert "0 ulp" in fp32["detail"]
    assert f"produced by {op_type} before and by BinaryOp after" in unfused["detail"] and "+1 BinaryOp" in unfused["detail"]
    assert mnn_cpu["passed"] and "gate passed" in mnn_cpu["detail"]
    fixed = onnx.load(r["artefact"])
    assert [n.op_type for n in fixed.graph.node if n.name == "up_relu"] == ["Max"]
    assert r["after"]["tensor_sqnr_db"] > 40 > r["before"]["tensor_sqnr_db"]
    # what only the phone can show is said plainly, with the command; no solved case until then
    assert r["not_proven"] and "phone" in r["not_proven"][0] and r["next_steps"][0]["tool"] == "run_on_device"
    assert r["next_steps"][0]["cli"] in r["not_proven"][0] and "--target device" in r["next_steps"][0]["cli"]
    assert not (tmp_path / "cases.jsonl").exists() and r["case_file"] is None


@pytest.mark.anyio
async def test_fused_activation_fix_through_the_mcp_tool(tmp_path: Path) -> None:
    _relu_lost(tmp_path, conv=False)
    async with connect(tmp_path, "auto") as client:
        res = await client.call_tool("fix_and_prove", {"result": "compare.json", "background": False})
        answer = ok(res)
    r = answer["result"]
    assert r["kind"] == "fused_activation" and r["proven"] and r["not_proven"]
    assert Path(r["artefact"]).name == "head.relu-unfused.onnx" and Path(r["artefact"]).is_file()
    text = " ".join(getattr(c, "text", "") for c in res.content)  # the MCP answer names the .mnn to ship too
    assert f"Fixed .mnn: {tmp_path / 'head.relu-unfused.mnn'}" in text and Path(r["mnn"]["path"]).is_file(), text
    assert not (tmp_path / "qnn-debug-cases.jsonl").exists()


def _clipped_encoding(folder: Path, bits: int) -> tuple[Path, Path]:
    """A QDQ deep conv net whose mid-network activation encoding is a quarter of the calibrated range, run on the
    simulator and compared: quantization located at that encoding."""
    from quant_models import activation_points, shrink_encoding
    from test_numerics_quant import CONFIGS, _as_npz, _setup

    _, q, _ = _setup(folder, *CONFIGS["a8w8" if bits == 8 else "a16w8"])
    shrunk = activation_points(onnx.load(str(q)))[3 if bits == 8 else 2]
    onnx.save(shrink_encoding(onnx.load(str(q)), shrunk), str(folder / "shrunk.onnx"))
    npz = _as_npz(folder, folder / "shrunk.onnx", "shrunk")
    res = runner.invoke(app, ["compare", str(folder / "base"), str(npz), "--json", str(folder / "compare.json")])
    assert res.exit_code == 0, res.output
    return folder / "compare.json", folder / "shrunk.onnx"


@pytest.mark.parametrize("bits", [8, 16])
def test_clipping_encoding_is_recomputed_from_the_reference_range_and_rerun(tmp_path: Path, bits: int):
    result, qdq = _clipped_encoding(tmp_path, bits)
    code, r = _fix(str(result), "--model", str(qdq), "--out", str(tmp_path / "fix"),
                   "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["kind"] == "encoding" and r["proven"], r["summary"]
    case = json.loads((tmp_path / "cases.jsonl").read_text())
    assert "clips the reference range" in case["cause"] and "fp16" not in case["cause"] + case["fix"]
    assert r["before"]["pattern"] == "encoding_range" and r["after"]["pattern"] != "encoding_range"
    assert r["after"]["tensor_sqnr_db"] > r["before"]["tensor_sqnr_db"] + 20
    override = json.loads((tmp_path / "shrunk.encodings-fixed.json").read_text())["activation_encodings"]
    (tensor, (enc,)), = override.items()
    assert tensor == r["before"]["tensor"] and enc["bitwidth"] == bits
    from qnn_debug.runstore import load_run

    ref = np.asarray(load_run(tmp_path / "base" / "reference").array(tensor))
    assert enc["min"] <= ref.min() and enc["max"] >= ref.max()
    assert Path(r["artefact"]).name == "shrunk.encodings-fixed.onnx"


@pytest.mark.anyio
async def test_encoding_and_shape_mutable_fixes_through_the_mcp_tool(mnn_fixtures: Path, tmp_path: Path) -> None:
    import shutil

    _clipped_encoding(tmp_path, 8)
    (tmp_path / "td").mkdir()
    _input_not_copied(tmp_path / "td", mnn_fixtures, "other_data")
    shutil.copytree(mnn_fixtures / "testdir", tmp_path / "td" / "testdir")
    async with connect(tmp_path, "auto") as client:
        enc = ok(await client.call_tool("fix_and_prove", {"result": "compare.json", "model": "shrunk.onnx",
                                                          "background": False}))
        sm = ok(await client.call_tool("fix_and_prove", {"result": "td/compare.json", "test_dir": "td/testdir",
                                                         "background": False}))
    assert enc["result"]["kind"] == "encoding" and enc["result"]["proven"]
    assert sm["result"]["kind"] == "shape_mutable" and not sm["result"]["proven"]
    assert json.loads((tmp_path / "td" / "testdir" / "input.json").read_text())["shapeMutable"] is False


# (layers, hidden): two sizes of the tiny Qwen3-shaped export with activation encodings on its integer tensors
LLM_SIZES = [(2, 128), (1, 64)]


@pytest.mark.parametrize(("layers", "hidden"), LLM_SIZES)
def test_llm_export_encodings_on_integer_tensors_are_removed_in_place_and_rechecked(tmp_path: Path, layers: int,
                                                                                     hidden: int):
    from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export
    from qnn_debug_testkit.tiny_graph import TinyQwen3Config

    folder = Path(build_tiny_export(tmp_path / "export", TinyExportRequest(
        fault="index_quant", config=TinyQwen3Config(layers=layers, hidden=hidden, heads=4, kv_heads=2))).dir)
    previous = (folder / "llm.mnn").read_bytes()
    code, r = _fix(str(folder), "--out", str(tmp_path / "fix"), "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["kind"] == "llm_export" and r["proven"], r["summary"]
    assert r["findings_before"] == ["quant_on_integer_tensor"] and r["findings_after"] == []
    assert all(c["passed"] for c in r["proof"]) and "bit-identical: True" in r["proof"][0]["detail"]
    assert (folder / "llm.mnn.previous").read_bytes() == previous and (folder / "llm.mnn").read_bytes() != previous
    assert len((folder / "llm.mnn").read_bytes()) == len(previous)  # an in-place edit of the describe vector
    again = runner.invoke(app, ["llm-check", str(folder), "--json"])
    assert "quant_on_integer_tensor" not in {f["id"] for f in json.loads(again.stdout)["findings"]}
    reexport, generate = r["commands"]
    assert reexport.startswith("python3 llmexport.py --path ") and "--generate_for_npu --smooth" in reexport
    assert generate.startswith(f"python3 generate_llm_qnn.py --model {folder} --soc_id 69 --dsp_arch v")
    assert r["not_proven"] and not (tmp_path / "cases.jsonl").exists()


@pytest.mark.anyio
async def test_llm_export_fix_through_the_mcp_tool(tmp_path: Path) -> None:
    from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export

    build_tiny_export(tmp_path / "export", TinyExportRequest(fault="index_quant"))
    async with connect(tmp_path, "auto") as client:
        answer = ok(await client.call_tool("fix_and_prove", {"result": "export", "background": False}))
    r = answer["result"]
    assert r["kind"] == "llm_export" and r["proven"] and r["findings_after"] == []
    assert (tmp_path / "export" / "llm.mnn.previous").is_file() and len(r["commands"]) == 2


def test_llm_finding_outside_the_graph_gets_the_commands_and_leaves_llm_mnn_alone(tmp_path: Path):
    from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export

    folder = Path(build_tiny_export(tmp_path / "export", TinyExportRequest(fault="mul_encoding")).dir)
    previous = (folder / "llm.mnn").read_bytes()
    check = runner.invoke(app, ["llm-check", str(folder), "--json"])
    (tmp_path / "check.json").write_text(check.stdout)
    code, r = _fix(str(tmp_path / "check.json"), "--out", str(tmp_path / "fix"))
    assert code == 0 and r["kind"] == "llm_export" and not r["proven"] and r["artefact"] is None
    assert "mul_output_shares_operand_encoding" in r["findings_before"] and len(r["commands"]) == 2
    assert (folder / "llm.mnn").read_bytes() == previous and not (folder / "llm.mnn.previous").exists()


def _input_not_copied(tmp_path: Path, mnn_fixtures: Path, double: str) -> None:
    """compare.json in ``tmp_path``: input_not_copied (a baseline on other data, or the input copy made constant)."""
    import shutil

    from qnn_debug.baseline import run_baseline

    model = mnn_fixtures / "testdir" / "test.onnx"
    dump = mnn_fixtures / "dumps" / "online_fp16"
    if double == "other_data":  # a baseline on random data against the dump of the fixture input
        run_baseline(model, tmp_path / "base", mnn_gate=False)
    else:  # the real dump with the backend's fp16 copy of x filled with 0.5 (test double)
        x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
        np.savez(tmp_path / "in.npz", x=x)
        run_baseline(model, tmp_path / "base", inputs=tmp_path / "in.npz", mnn_gate=False)
        shutil.copytree(dump, tmp_path / "dump")
        dump = tmp_path / "dump"
        raw = next(dump.glob("*_t0_cast.raw"))
        raw.write_bytes(np.full(raw.stat().st_size // 2, 0.5, np.float16).tobytes())
    res = runner.invoke(app, ["compare", str(tmp_path / "base"), str(dump), "--mnn-model",
                              str(mnn_fixtures / "test.mnn"), "--json", str(tmp_path / "compare.json")])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("double", ["other_data", "constant_copy"])
def test_input_not_copied_sets_shape_mutable_false_and_says_what_is_not_proven(
        mnn_fixtures: Path, tmp_path: Path, double: str):
    import shutil

    _input_not_copied(tmp_path, mnn_fixtures, double)
    shutil.copytree(mnn_fixtures / "testdir", tmp_path / "testdir")
    previous = (tmp_path / "testdir" / "input.json").read_text()
    code, r = _fix(str(tmp_path / "compare.json"), "--test-dir", str(tmp_path / "testdir"),
                   "--cases", str(tmp_path / "cases.jsonl"))
    assert code == 0 and r["kind"] == "shape_mutable" and r["proven"] is False
    assert r["before"]["verdict"] == "input_not_copied"
    assert json.loads((tmp_path / "testdir" / "input.json").read_text())["shapeMutable"] is False
    assert (tmp_path / "testdir" / "input.json.bak").read_text() == previous
    step = r["next_steps"][0]
    assert step["tool"] == "run_on_device" and str(mnn_fixtures / "test.mnn") in step["cli"]
    assert "--testdir" in step["cli"] and r["not_proven"] and "phone" in r["summary"]
    assert not (tmp_path / "cases.jsonl").exists()
