"""The MNN CPU gate on the cases users hit: int64 token ids, a fused SiLU, a real MNN/ORT disagreement (Round:
MNN rounds halves away from zero, ONNX to even) named at its first tensor, and what compare, diagnose and the MCP
server say when the reference is not trusted."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from next_steps_check import check_steps
from numerics_models import decoder_llm, token_ids
from qnn_debug.cli import app
from qnn_debug.runstore import load_run
from test_mcp_support import connect, ok

runner = CliRunner()

# two decoders of different sizes (int64 ``ids`` → embedding Gather, RMSNorm, GQA, SwiGLU), small residual outliers
DECODERS = {
    "small": {"hidden": 64, "layers": 2, "tokens": 16, "vocab": 96, "big_value": 8.0, "seed": 0},
    "wider": {"hidden": 128, "layers": 3, "tokens": 24, "vocab": 300, "big_value": 8.0, "seed": 4},
}


def _cli_json(args: list[str]) -> tuple[int, dict]:
    res = runner.invoke(app, [*args, "--json"])
    return res.exit_code, json.loads(res.stdout)


@pytest.fixture(scope="module", params=sorted(DECODERS))
def decoder_baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    cfg = DECODERS[request.param]
    tmp = tmp_path_factory.mktemp(f"decoder_{request.param}")
    onnx.save(decoder_llm(**cfg), str(tmp / "m.onnx"))
    ids = token_ids(cfg["tokens"], cfg["vocab"], seed=cfg["seed"])
    ids[0, :3] = [cfg["vocab"] - 1, 79, 200 % cfg["vocab"]]  # ids whose int64 high halves are zero, as in the report
    np.savez(tmp / "in.npz", ids=ids)
    code, doc = _cli_json(["baseline", str(tmp / "m.onnx"), "--inputs", str(tmp / "in.npz"), "--out", str(tmp / "base")])
    assert code == 0, doc
    return request.param, tmp, doc


def test_int64_ids_reach_mnn_by_value_and_the_gate_passes(decoder_baseline: tuple[str, Path, dict]) -> None:
    """Before: MNN read the int64 buffer as int32 ([79, 0, 200, 0, ...]) and the gate failed at 0.4 on logits."""
    _, tmp, doc = decoder_baseline
    report = doc["report"]
    assert report["trusted"] is True and report["gate"]["status"] == "passed", report["sentence"]
    assert report["gate"]["max_rel_error"] < 1e-5  # measured 1.8e-7 and 2.0e-7
    fed = load_run(tmp / "base" / "mnn_cpu")
    ids = np.load(tmp / "in.npz")["ids"]
    assert fed.info("ids").dtype == "int32" and np.array_equal(fed.array("ids"), ids)  # the .mnn declares int32
    ref, mnn = load_run(tmp / "base" / "reference"), fed
    emb = np.asarray(ref.array("h_0"))
    assert np.abs(np.asarray(mnn.array("h_0")).reshape(emb.shape) - emb).max() == 0  # the embedding Gather agrees


def test_fused_silu_is_compared_with_the_last_node_it_covers(decoder_baseline: tuple[str, Path, dict]) -> None:
    """MNN fuses Sigmoid·Mul into a SiLU op named after the Mul, whose output keeps the MatMul output's name:
    before, that tensor was compared with the MatMul's reference (a false 0.95 error, the gate's worst tensor)."""
    name, tmp, doc = decoder_baseline
    gate = doc["report"]["gate"]
    assert gate["worst_tensor_rel_error"] < 1e-5, gate  # every shared tensor agrees once pairs are right
    assert gate["first_divergent"] is None
    layers = DECODERS[name]["layers"]
    mnn = load_run(tmp / "base" / "mnn_cpu")
    for layer in range(layers):
        rec = mnn.info(f"l{layer}_gate")
        assert rec.equivalent is not None and rec.equivalent.kind == "fused_output"
        assert rec.equivalent.of == [f"l{layer}_silu"]
    # compare pairs the MNN run the same way: the fused tensor is a row standing for the SiLU output
    code, out = _cli_json(["compare", str(tmp / "base"), str(tmp / "base" / "mnn_cpu")])
    assert code == 0 and out["reference_trusted"] is True
    rows = {r["name"]: r for r in out["tensors"]}
    assert rows["l0_gate"]["stands_for"] == "l0_silu" and out["verdict"]["kind"] == "ok", out["verdict"]["summary"]


def test_the_users_own_mnn_is_gated_the_same_way(decoder_baseline: tuple[str, Path, dict], tmp_path: Path) -> None:
    """``--mnn-model``: the user's .mnn gets int64 ids by value and its fused SiLU paired with the Mul's reference."""
    import shutil

    _, tmp, _ = decoder_baseline
    own = shutil.copy(tmp / "base" / "mnn_cpu" / "model.mnn", tmp_path / "own.mnn")
    code, doc = _cli_json(["baseline", str(tmp / "m.onnx"), "--inputs", str(tmp / "in.npz"), "--mnn-model", str(own),
                           "--out", str(tmp_path / "base")])
    assert code == 0, doc
    check = doc["report"]["mnn_model"]
    assert check["gate"]["status"] == "passed" and check["same_as_converted"] is True, check
    assert check["gate"]["worst_tensor_rel_error"] < 1e-5 and check["gate"]["first_divergent"] is None, check["gate"]
    assert load_run(tmp_path / "base" / "mnn_user").info("l0_gate").equivalent is not None


def _cast_model(tmp: Path) -> Path:
    """int64 ``ids`` → Cast → ×0.5: ONNX Runtime takes any int64."""
    nodes = [helper.make_node("Cast", ["ids"], ["f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "half"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp / "cast.onnx"))
    return tmp / "cast.onnx"


@pytest.mark.parametrize("bad", [2**31, -(2**31) - 1, 2**40])
def test_an_id_beyond_int32_is_refused_not_wrapped(tmp_path: Path, bad: int) -> None:
    model = _cast_model(tmp_path)
    np.savez(tmp_path / "in.npz", ids=np.array([[1, 2, bad, 3]], dtype=np.int64))
    code, doc = _cli_json(["baseline", str(model), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "b")])
    assert code == 2 and doc["error"] == "bad_input", doc
    assert "'ids'" in doc["message"] and str(bad) in doc["message"] and "int32" in doc["message"]
    assert "[0, 2]" in doc["message"] and "2147483647" in doc["hint"]


# --- a real MNN CPU / ONNX Runtime disagreement: Round of exact halves -------------------------------------


def round_conv_net() -> onnx.ModelProto:
    """x (values k + 0.5) → Round → x - Round(x) → Conv 1x1 → y."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Round", ["x"], ["r"], name="round"),
             helper.make_node("Sub", ["x", "r"], ["frac"], name="frac"),
             helper.make_node("Conv", ["frac", "w", "b"], ["y"], name="mix")]
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "b")]
    graph = helper.make_graph(nodes, "round_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def round_decoder() -> onnx.ModelProto:
    """The small decoder with its embeddings on quarter steps and rounded to halves (Round(2·h)/2) right after the
    embedding Gather: every later op agrees on MNN and ORT, Round does not."""
    model = decoder_llm(**{k: v for k, v in DECODERS["small"].items()})
    graph = model.graph
    embed = next(i for i in graph.initializer if i.name == "embed")
    values = numpy_helper.to_array(embed)
    embed.CopyFrom(numpy_helper.from_array((np.floor(values * 2) / 2 + 0.25).astype(np.float32), "embed"))
    for node in graph.node:
        node.input[:] = ["h_0q" if i == "h_0" else i for i in node.input]
    graph.initializer.extend([numpy_helper.from_array(np.array(2.0, np.float32), "x2"),
                              numpy_helper.from_array(np.array(0.5, np.float32), "x05")])
    gather = next(i for i, n in enumerate(graph.node) if n.name == "embed_tokens")
    for k, node in enumerate([helper.make_node("Mul", ["h_0", "x2"], ["h_0d"], name="embed_double"),
                              helper.make_node("Round", ["h_0d"], ["h_0r"], name="embed_round"),
                              helper.make_node("Mul", ["h_0r", "x05"], ["h_0q"], name="embed_half")]):
        graph.node.insert(gather + 1 + k, node)
    onnx.checker.check_model(model)
    return model


ROUND_MODELS = {"conv": ("r", "Round round"), "decoder": ("h_0r", "Round embed_round")}


@pytest.fixture(scope="module", params=sorted(ROUND_MODELS))
def round_baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    tmp = tmp_path_factory.mktemp(f"round_{request.param}")
    if request.param == "conv":
        onnx.save(round_conv_net(), str(tmp / "m.onnx"))
        x = np.random.default_rng(1).integers(-4, 4, (1, 3, 8, 8)) + 0.5
        np.savez(tmp / "in.npz", x=x.astype(np.float32))
    else:
        onnx.save(round_decoder(), str(tmp / "m.onnx"))
        np.savez(tmp / "in.npz", ids=token_ids(16, 96))
    code, doc = _cli_json(["baseline", str(tmp / "m.onnx"), "--inputs", str(tmp / "in.npz"), "--out", str(tmp / "base")])
    assert code == 0, doc
    return request.param, tmp, doc


def test_gate_names_the_first_divergent_tensor_and_the_worst(round_baseline: tuple[str, Path, dict]) -> None:
    """Before: only the worst tensor was named (downstream of the cause)."""
    kind, _, doc = round_baseline
    report, gate = doc["report"], doc["report"]["gate"]
    first, op = ROUND_MODELS[kind]
    assert report["trusted"] is False and gate["status"] == "failed"
    assert (gate["first_divergent"], gate["first_divergent_op"]) == (first, op)
    assert gate["first_divergent_rel_error"] > gate["first_divergent_limit"]
    assert gate["worst_tensor"] != first and gate["worst_tensor_rel_error"] > gate["first_divergent_rel_error"]
    sentence = report["sentence"]
    assert sentence.index(f"first differ at '{first}'") < sentence.index(f"the worst is '{gate['worst_tensor']}'")


def _run_steps(steps: list[dict]) -> None:
    """Every printed step, run as printed (through the CLI app, in-process)."""
    check_steps(steps)
    for step in steps:
        argv = shlex.split(step["cli"])
        res = runner.invoke(app, argv[1:])
        assert res.exit_code == 0, (step["cli"], res.output[-2000:])


def test_compare_against_an_untrusted_reference_says_so_first(round_baseline: tuple[str, Path, dict]) -> None:
    """Before: a verdict with no word about the failed gate (and no ``reference_trusted`` in the JSON)."""
    _, tmp, doc = round_baseline
    report_dir = tmp / "report"
    code, out = _cli_json(["compare", str(tmp / "base"), str(tmp / "base" / "mnn_cpu"), "--report", str(report_dir)])
    assert code == 0, out
    assert out["reference_trusted"] is False and out["reference_note"] == doc["report"]["sentence"]
    assert out["verdict"]["summary"].startswith("Reference not trusted: MNN CPU and ONNX Runtime disagree")
    md = (report_dir / "compare.md").read_text()
    assert md.index("REFERENCE NOT TRUSTED") < md.index("**Verdict:**")
    saved = json.loads((report_dir / "compare.json").read_text())
    assert saved["reference_trusted"] is False
    if out["next_steps"]:
        _run_steps(out["next_steps"])


def test_diagnose_from_an_untrusted_reference_says_so_first(tmp_path: Path) -> None:
    onnx.save(round_conv_net(), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=(np.random.default_rng(2).integers(-4, 4, (1, 3, 8, 8)) + 0.5).astype(np.float32))
    code, doc = _cli_json(["diagnose", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
                           "--out", str(tmp_path / "d")])
    assert code == 0, doc
    assert doc["baseline_trusted"] is False and doc["compare"]["reference_trusted"] is False
    assert doc["compare"]["verdict"]["summary"].startswith("Reference not trusted")
    human = runner.invoke(app, ["compare", str(tmp_path / "d" / "baseline"), str(tmp_path / "d" / "htp-sim")])
    assert human.exit_code == 0 and "Reference not trusted" in human.output
    if doc["compare"]["next_steps"]:
        _run_steps(doc["compare"]["next_steps"])


def test_a_trusted_reference_is_marked_trusted(decoder_baseline: tuple[str, Path, dict]) -> None:
    _, tmp, _ = decoder_baseline
    code, out = _cli_json(["compare", str(tmp / "base"), str(tmp / "base" / "mnn_cpu")])
    assert code == 0 and out["reference_trusted"] is True and not out["verdict"]["summary"].startswith("Reference")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_compare_and_diagnose_put_the_distrust_first(tmp_path: Path) -> None:
    onnx.save(round_conv_net(), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=(np.random.default_rng(3).integers(-4, 4, (1, 3, 8, 8)) + 0.5).astype(np.float32))
    async with connect(tmp_path, "auto") as client:
        diag = ok(await client.call_tool("diagnose", {"model": "m.onnx", "inputs": "in.npz", "background": False}))
        base = Path(diag["result"]["baseline"]).relative_to(tmp_path)
        compared = ok(await client.call_tool("compare", {"reference": str(base), "target": str(base / "mnn_cpu"),
                                                         "background": False}))
    assert diag["summary"].startswith("Reference not trusted: MNN CPU and ONNX Runtime disagree")
    assert diag["result"]["compare"]["reference_trusted"] is False
    assert compared["summary"].startswith("Reference not trusted: MNN CPU and ONNX Runtime disagree")
    assert "reference_trusted: false" in compared["summary"]
    assert compared["result"]["reference_trusted"] is False
