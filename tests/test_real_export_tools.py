"""The host tools on ``llm.onnx`` / ``visual.onnx`` exactly as MNN's llmexport writes them (random-weight toy Qwen3
and Qwen3-VL, two sizes each): no ``--shape``, no ``--inputs``.

Before the preparation step (``qnn_debug.llm.onnx_export``) every one of these failed on the dynamic ``seq_len``
("input 'input_ids' has dynamic dimension(s)") or, with ``--shape``, on ``LlmExporter::FusedAttention`` ("is not a
registered function/op"); ``visual.onnx`` was refused for its node names ("carry no decoder layer index").
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug_testkit import real_faults as F

runner = CliRunner()


def _cli(*args: str, code: tuple[int, ...] = (0, 1)) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code in code, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _copy(real_exports: Any, tmp: Path, kind: str, model: str, name: str = "clean") -> Path:
    """A private copy (the tools write the standard-ONNX graph beside llm.onnx; the cache stays as built)."""
    return F.copy_export(real_exports(kind, model, "onnx"), tmp / name)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "model"), [("qwen3", "a"), ("qwen3", "b"), ("qwen3_vl", "a")])
def test_localise_blocks_runs_on_a_clean_real_llm_onnx(real_exports, tmp_path: Path, kind: str, model: str) -> None:
    folder = _copy(real_exports, tmp_path, kind, model)
    doc = _cli("localise-blocks", str(folder / "onnx" / "llm.onnx"), "--out", str(tmp_path / "blocks"))
    assert doc["verdict"] == "ok", doc["summary"]
    layers = [b for b in doc["blocks"] if not b["label"]]
    assert len(layers) == json.loads((folder / "llm_config.json").read_text())["layer_nums"]
    assert any("FusedAttention" in w for w in doc["warnings"]), doc["warnings"]
    assert (folder / "onnx" / "llm.prefill.qnn-debug.onnx").is_file()  # beside the original, weights shared


@pytest.mark.slow
def test_bisect_baseline_and_diagnose_run_on_a_clean_real_llm_onnx(real_exports, tmp_path: Path) -> None:
    model = str(_copy(real_exports, tmp_path, "qwen3", "a") / "onnx" / "llm.onnx")
    base = _cli("baseline", model, "--out", str(tmp_path / "baseline"))
    feeds = np.load(base["inputs_path"])
    assert feeds["input_ids"].shape == (128, 1, 128)  # generate_llm_qnn.py's chunk, llm_config's hidden
    assert feeds["attention_mask"][0, 0, 0, 1] == np.finfo(np.float32).min and feeds["attention_mask"][0, 0, 1, 0] == 0
    assert feeds["position_ids"].tolist() == [list(range(128))]
    # the baseline's inputs (logits_index folded into the graph, so not among them) feed the next tool as they are
    b = _cli("bisect", model, "--inputs", base["inputs_path"], "--out", str(tmp_path / "bisect"))
    assert b["verdict"] == "ok", b["summary"]
    d = _cli("diagnose", model, "--out", str(tmp_path / "diagnose"))
    assert d["compare"]["verdict"]["kind"] == "ok", d["compare"]["verdict"]
    # compare --model llm.onnx reads the standard graph the runs were made with (the lowered attention's tensors)
    run = next(p for p in sorted(Path(d["out"]).glob("htp-sim*")) if (p / "run.json").is_file())  # chunked or not
    c = _cli("compare", d["baseline"], str(run), "--model", model, "--report", str(tmp_path / "report"))
    assert c["verdict"]["kind"] == "ok"
    assert not any("not in the model" in w for w in c.get("warnings", []))


@pytest.mark.slow
def test_localise_blocks_and_bisect_name_the_faulted_layer_and_op_of_a_real_export(real_exports, tmp_path: Path) -> None:
    clean = _copy(real_exports, tmp_path, "qwen3", "b")
    fault = F.rotary_without_neg(real_exports("qwen3", "b", "onnx"), tmp_path / "faulted", 1)
    ref = str(clean / "onnx" / "llm.onnx")
    doc = _cli("localise-blocks", fault.file, "--reference-model", ref, "--out", str(tmp_path / "blocks"))
    assert doc["verdict"] == "real_bug"
    assert doc["first_failing_block"]["first"] == fault.layer
    assert doc["first_failing"]["op"] == fault.op
    b = _cli("bisect", fault.file, "--reference-model", ref, "--out", str(tmp_path / "bisect"))
    assert b["verdict"] == "real_bug" and b["first_failing"]["op"] == fault.op


@pytest.mark.slow
def test_localise_blocks_finds_the_layers_of_a_real_visual_onnx(real_exports, tmp_path: Path) -> None:
    from qnn_debug.onnx_graph import nodes_in_order

    clean = _copy(real_exports, tmp_path, "qwen3_vl", "a")
    doc = _cli("localise-blocks", str(clean), "--out", str(tmp_path / "run-clean"))  # a VL folder: visual.onnx
    assert doc["graph"].startswith("vision") and doc["verdict"] == "ok", doc["summary"]
    assert len([b for b in doc["blocks"] if not b["label"]]) == 3  # the toy encoder's depth

    # vision block 2's attention residual dropped (the block returns its attention branch alone). The toy's random
    # weights keep activations tiny, so a lost rotate-half Neg or tanh moves image_embeds by < 1e-3 (SQNR 65 dB):
    # invisible to any tool; this fault moves them to -2.9 dB.
    from qnn_debug.localise.structure import structural_layers

    ref = _copy(real_exports, tmp_path, "qwen3_vl", "b", "clean-b")
    folder = _copy(real_exports, tmp_path, "qwen3_vl", "b", "faulted-b")
    path = folder / "onnx" / "visual.onnx"
    model = F._load(path)
    layer2 = {nodes_in_order(model)[p].name for p in structural_layers(model)[2]}
    assert "/Add_23" in layer2
    first_reader = next(n.name for n in model.graph.node if "/Add_23_output_0" in n.input)
    F._bypass(model, "/Add_23", keep_input=1)
    F._save(model, path)
    # 256 patches: at the default 1024 the op stage's side-by-side session exceeds the simulator's memory here
    doc = _cli("localise-blocks", str(folder), "--reference-model", str(ref), "--shape", "patches=256x1536",
               "--out", str(tmp_path / "run-fault"))
    assert doc["verdict"] == "real_bug"
    assert doc["first_failing_block"]["first"] == 2
    # the dropped Add itself is named (compare's missing-op pattern), with the reader where it is first seen
    assert doc["first_failing"]["op"] == "/Add_23" and "missing in the target" in doc["summary"], doc["summary"]
    assert first_reader.split("/")[1] in doc["summary"]


@pytest.mark.parametrize(("kind", "model", "depth"), [("qwen3_vl", "a", 3), ("qwen3_vl", "b", 4)])
def test_visual_layers_come_from_the_graph_structure(real_exports, kind: str, model: str, depth: int) -> None:
    from qnn_debug.localise.cut import decoder_layers, layer_of
    from qnn_debug.onnx_graph import load_onnx, nodes_in_order

    graph = load_onnx(real_exports(kind, model, "onnx") / "onnx" / "visual.onnx", load_external_data=False)
    assert not any(layer_of(n.name) is not None for n in graph.graph.node)  # the names say nothing
    layers = decoder_layers(graph)
    assert sorted(layers) == list(range(depth))
    nodes = nodes_in_order(graph)
    for positions in layers.values():
        ops = [nodes[p] for p in positions]
        assert sum(n.op_type == "Softmax" for n in ops) == 1
        assert not any("merger" in n.name for n in ops)  # the deepstack mergers read the stream; not the layer's
        assert len({n.position for n in ops}) == len(ops)
    assert not set(layers[0]) & set(layers[1])


def _edited(real_exports: Any, tmp: Path, edit: Any) -> Path:
    folder = _copy(real_exports, tmp, "qwen3", "a")
    path = folder / "onnx" / "llm.onnx"
    model = onnx.load(str(path), load_external_data=False)
    edit(model)
    onnx.save(model, str(path))
    return path


def test_an_unknown_custom_op_is_a_typed_error_naming_it(real_exports, tmp_path: Path) -> None:
    def edit(model: onnx.ModelProto) -> None:
        node = next(n for n in model.graph.node if n.op_type == "Sigmoid")
        node.op_type, node.domain = "FastSigmoid", "Vendor"
        model.opset_import.append(helper.make_opsetid("Vendor", 1))

    path = _edited(real_exports, tmp_path, edit)
    res = runner.invoke(app, ["localise-blocks", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "Vendor::FastSigmoid" in res.output and "/blocks.0/mlp/act_fn/Sigmoid" in res.output


def test_fake_linear_without_weights_is_a_typed_error_saying_to_re_export(real_exports, tmp_path: Path) -> None:
    def edit(model: onnx.ModelProto) -> None:  # what llmexport's MNN path writes for each linear
        node = next(n for n in model.graph.node if n.name == "/layers.0/self_attn/q_proj/Linear")
        fake = helper.make_node("FakeLinear", [node.input[0]], list(node.output), name=node.name, domain="LlmExporter",
                                in_features=128, out_features=128, has_bias=0, name_s=node.name)
        model.graph.node.insert(list(model.graph.node).index(node), fake)
        model.graph.node.remove(node)

    path = _edited(real_exports, tmp_path, edit)
    res = runner.invoke(app, ["diagnose", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "FakeLinear" in res.output and "--export onnx" in res.output


@pytest.mark.parametrize("model", ["a", "b"])
def test_the_lowered_attention_matches_transformers(real_exports, tmp_path: Path, model: str) -> None:
    """Logits of the standard-ONNX graph on ONNX Runtime against the Hugging Face model the export came from."""
    import onnxruntime as ort

    import real_exports as tier
    from qnn_debug.llm.onnx_export import prepare_model

    folder = _copy(real_exports, tmp_path, "qwen3", model)
    hidden = json.loads((folder / "llm_config.json").read_text())["hidden_size"]
    prepared = prepare_model(folder / "onnx" / "llm.onnx", shapes={"input_ids": [24, 1, hidden]}, seed=3)
    feeds = dict(np.load(prepared.inputs or ""))
    session = ort.InferenceSession(prepared.model, providers=["CPUExecutionProvider"])
    ours = session.run(["logits"], feeds)[0].reshape(-1)
    np.save(tmp_path / "emb.npy", feeds["input_ids"])
    code = ("import sys, numpy as np, torch\nfrom transformers import AutoModelForCausalLM\n"
            "m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()\n"
            "e = torch.from_numpy(np.load(sys.argv[2])).permute(1, 0, 2)\n"
            "with torch.no_grad(): np.save(sys.argv[3], m(inputs_embeds=e).logits[0, -1].numpy())\n")
    subprocess.run([str(tier._python()), "-c", code, str(tier.hf_folder("qwen3", model)), str(tmp_path / "emb.npy"),
                    str(tmp_path / "hf.npy")], check=True, capture_output=True, timeout=300, env=tier._base_env())
    theirs = np.load(tmp_path / "hf.npy")
    assert np.abs(ours - theirs).max() < 1e-4 * max(1.0, float(np.abs(theirs).max()))


@pytest.mark.parametrize("model", ["a", "b"])
def test_the_visual_erf_is_lowered_for_the_simulator_without_changing_the_result(real_exports, tmp_path: Path,
                                                                                 model: str) -> None:
    """The QNN execution provider has no Erf (the exact GELU of the mergers): the simulator run gets a polynomial."""
    import onnxruntime as ort

    from qnn_debug.llm.onnx_export import prepare_model
    from qnn_debug.targets.sim_lowering import lower_for_simulator

    folder = _copy(real_exports, tmp_path, "qwen3_vl", model)
    prepared = prepare_model(folder / "onnx" / "visual.onnx", shapes={"patches": [256, 1536]})
    feeds = dict(np.load(prepared.inputs or ""))
    graph = onnx.load(prepared.model)
    erfs = sum(n.op_type == "Erf" for n in graph.graph.node)
    assert erfs >= 3
    want = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    notes = lower_for_simulator(graph)
    assert len([w for w in notes if w.startswith("Erf")]) == erfs
    assert not any(n.op_type == "Erf" for n in graph.graph.node)
    got = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, got, strict=True):
        assert np.abs(w - g).max() <= 1e-5 * max(1.0, float(np.abs(w).max()))
