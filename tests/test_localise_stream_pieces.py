"""``bisect`` and ``diagnose`` (chunked marking) stream a model that does not fit one simulator session within
``--max-memory``: opened without its weights, cut into pieces that point into the original data file, the
baseline written unit by unit, and a unit that cannot fit refused with a typed error.

Models: the sized Qwen3 builder (``qnn_debug_testkit.sized``) at two small widths with external data, and an
onnx.helper graph with ReduceSumSquare (the simulator refuses it; MNN's converter lowers it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_debug import api
from qnn_debug.errors import MemoryBudgetError
from qnn_debug.localise.budget import PROCESS_BASE, block_cost
from qnn_debug.localise.external import open_lazy, weight_bytes
from qnn_debug.localise.pieces import plan_units
from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder
from qnn_debug_testkit.tiny_graph import GraphFaults

SMALL = Qwen3Sizes(layers=3, hidden=128, heads=4, kv_heads=2, head_dim=64, intermediate=256, vocab=600)
WIDER = Qwen3Sizes(layers=4, hidden=256, heads=8, kv_heads=4, head_dim=48, intermediate=512, vocab=800, seed=3)


def _piece_budget(model: str, seq: int, hidden: int) -> int:
    """Room for the heaviest unit (a layer, or the ops outside the layers) but not for the whole model."""
    from qnn_debug.localise.external import tensor_sizes

    lazy = open_lazy(model)
    sizes = tensor_sizes(lazy.model)
    nodes = lazy.model.graph.node
    units = [sum(sizes.get(i, 0) for i in {i for p in u for i in nodes[p].input}) for u in plan_units(lazy.model)]
    budget = PROCESS_BASE + int(max(block_cost(w, seq * hidden * 4) for w in units) * 1.05)
    assert budget < PROCESS_BASE + 2.5 * weight_bytes(lazy.model)  # the whole model would not fit
    return budget


@pytest.fixture
def no_weights_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any load of a model's external weights in this process fails the test."""
    import qnn_debug.onnx_graph as og

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model's external weights were loaded")

    monkeypatch.setattr(og, "_load_external_data", refuse)


def _pieces_point_into(folder: Path, data: Path) -> list[Path]:
    files = sorted(folder.glob("piece*.onnx"))
    for f in files:
        m = onnx.load(str(f), load_external_data=False)
        ext = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
        assert ext and {e.value for t in ext for e in t.external_data if e.key == "location"} == {data.name}, f
        assert f.stat().st_size < data.stat().st_size / 4  # no copy of the weights
    assert not list(folder.glob("*.data"))
    return files


def test_bisect_streams_pieces_that_point_into_the_data_file(tmp_path: Path, no_weights_loaded: None) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=1)})
    budget = _piece_budget(d.clean, 16, SMALL.hidden)
    r = api.execute("bisect", {"model": d.faulty["rotary"], "reference_model": d.clean, "inputs": d.inputs,
                               "out": str(tmp_path / "b"), "max_memory": str(budget)})
    assert r.first_failing is not None and r.first_failing.op == "/layers.1/self_attn/rotary_q/Concat"
    assert r.timings["pieces"] >= 2 and r.timings["htp_sim_pieces_s"] > 0
    assert len(_pieces_point_into(tmp_path / "b" / "probes", Path(d.data))) == r.timings["pieces"]
    assert not (tmp_path / "b" / "probes" / "model.onnx").exists()  # the whole model was never written out
    ref = json.loads((tmp_path / "b" / "baseline" / "reference" / "run.json").read_text(encoding="utf-8"))
    assert "one unit at a time" in ref["extra"]["streamed"]
    assert "/layers.1/self_attn/rotary_q/Concat_output_0" in {t["name"] for t in ref["tensors"]}


def test_diagnose_streams_chunked_marking_and_finds_the_overflow_at_another_width(tmp_path: Path,
                                                                                  no_weights_loaded: None) -> None:
    d = build_sized_decoder(tmp_path / "m", WIDER, seq=16, faults={"spike": GraphFaults(residual_spike_layer=1)})
    budget = _piece_budget(d.faulty["spike"], 16, WIDER.hidden)
    r = api.execute("diagnose", {"model": d.faulty["spike"], "inputs": d.inputs, "out": str(tmp_path / "d"),
                                 "max_memory": str(budget)})
    assert r.method == "chunked_dump" and r.compare is not None, r.fallback
    assert (r.compare.verdict.kind, r.compare.verdict.pattern) == ("precision", "fp16_range")
    assert r.compare.first_failing is not None and r.compare.first_failing.op == "/layers.2/input_layernorm/Pow"
    assert "over the memory budget" in r.fallback.full_dump_not_used and "piece by piece" in r.fallback.full_dump_not_used
    run = json.loads((tmp_path / "d" / "htp-sim-chunked" / "run.json").read_text(encoding="utf-8"))
    assert run["extra"]["streamed"] and len(run["extra"]["chunks"]) == WIDER.layers + 2  # layers + before + after
    assert any("does not fit one session" in w for w in run["warnings"])


def test_diagnose_streamed_finds_the_rotary_against_the_clean_reference(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=2)})
    budget = _piece_budget(d.clean, 16, SMALL.hidden)
    r = api.execute("diagnose", {"model": d.faulty["rotary"], "reference_model": d.clean, "inputs": d.inputs,
                                 "out": str(tmp_path / "d"), "max_memory": str(budget)})
    assert r.method == "chunked_dump" and r.compare is not None
    assert r.compare.first_failing is not None and r.compare.first_failing.op == "/layers.2/self_attn/rotary_q/Concat"


def test_a_piece_that_cannot_fit_is_a_typed_error(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16)
    with pytest.raises(MemoryBudgetError) as e:
        api.execute("diagnose", {"model": d.clean, "inputs": d.inputs, "out": str(tmp_path / "d"),
                                 "max_memory": str(PROCESS_BASE + 1024)})
    assert "--max-memory" in (e.value.hint or "") and e.value.details["budget_bytes"] == PROCESS_BASE + 1024
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "bisect", d.clean, "--inputs", d.inputs,
                           "--max-memory", f"{(PROCESS_BASE + 1024) >> 20}M", "--out", str(tmp_path / "b"), "--json"],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["error"] == "memory_budget" and "--max-memory" in doc["hint"], doc


def _sumsq_layers(path: Path, flip: bool = False) -> Path:
    """Two '/layers.N/' blocks, each x * 1/(1 + ReduceSumSquare(x)) then a MatMul; ``flip`` negates layer 1's weight."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(2):
        w = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
        if flip and k == 1:
            w = -w
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(np.ones(1, np.float32), f"one{k}")]
        p = f"/layers.{k}"
        nodes += [helper.make_node("ReduceSumSquare", [x], [f"{p}/ss"], name=f"{p}/norm/ReduceSumSquare", axes=[1],
                                   keepdims=1),
                  helper.make_node("Add", [f"{p}/ss", f"one{k}"], [f"{p}/den"], name=f"{p}/norm/Add"),
                  helper.make_node("Div", [x, f"{p}/den"], [f"{p}/n"], name=f"{p}/norm/Div"),
                  helper.make_node("MatMul", [f"{p}/n", f"w{k}"], [f"{p}/y"], name=f"{p}/mlp/MatMul")]
        x = f"{p}/y"
    nodes.append(helper.make_node("Identity", [x], ["out"], name="/head/Identity"))
    g = helper.make_graph(nodes, "sumsq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [8, 16])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), str(path))
    return path


def test_bisect_and_localise_blocks_lower_reduce_sum_square_for_the_simulator(tmp_path: Path) -> None:
    clean, bad = _sumsq_layers(tmp_path / "clean.onnx"), _sumsq_layers(tmp_path / "bad.onnx", flip=True)
    b = api.execute("bisect", {"model": str(bad), "reference_model": str(clean), "out": str(tmp_path / "b"),
                               "mnn_gate": False})
    assert b.first_failing is not None and b.first_failing.op == "/layers.1/mlp/MatMul"
    assert any("ReduceSumSquare" in w and "ReduceSum(Mul(x, x))" in w for w in b.warnings), b.warnings
    blk = api.execute("localise_blocks", {"model": str(bad), "reference_model": str(clean), "inner": "none",
                                          "out": str(tmp_path / "l")})
    assert blk.first_failing_block is not None and blk.first_failing_block.first == 1
    assert blk.first_failing is not None and blk.first_failing.op == "/layers.1/mlp/MatMul"
    assert [w.split("'")[1] for w in blk.warnings if "ReduceSumSquare" in w] == [
        "/layers.0/norm/ReduceSumSquare", "/layers.1/norm/ReduceSumSquare"], blk.warnings


@pytest.mark.parametrize("big", [64 << 20, 0])
def test_the_streamed_baseline_equals_the_whole_model_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               big: int) -> None:
    """Reference and fp16 floor written unit by unit hold what the one-session baseline holds; ``big=0`` rounds every
    weight chunk by chunk and hands it to ONNX Runtime in place, as the LM head of a real-size model is."""
    from qnn_debug.localise import stream_baseline as sb
    from qnn_debug.runstore import load_run

    monkeypatch.setattr(sb, "BIG_WEIGHT", big)
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=8)
    whole = api.execute("baseline", {"model": d.clean, "inputs": d.inputs, "out": str(tmp_path / "whole"),
                                     "mnn_gate": False})
    sb.stream_baseline(Path(d.clean), tmp_path / "streamed", inputs=Path(d.inputs), shapes=None, seed=0,
                       budget=PROCESS_BASE + (64 << 20))
    for sub in ("reference", "fp16_floor"):
        a, b = load_run(Path(whole.out) / sub), load_run(tmp_path / "streamed" / sub)
        assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
        for t in a.tensors:
            np.testing.assert_allclose(b.array(t.name), a.array(t.name), rtol=1e-5, atol=1e-5, err_msg=t.name)



def _sin_negated_between_layers(clean: str, dst: Path, layer: int) -> Path:
    """A copy whose layer ``layer`` reads the rotary sin table through a new Neg placed between the layers (it
    rotates backwards): the copy computes a tensor the original has not, as an op a converter or a user inserts."""
    model = onnx.load(clean, load_external_data=False)
    nodes = list(model.graph.node)
    sin = "/rotary/Unsqueeze_1_output_0"
    readers = [n for n in nodes if n.name.startswith(f"/layers.{layer}/") and sin in n.input]
    assert readers
    for n in readers:
        n.input[list(n.input).index(sin)] = "/rotary_edit/Neg_output_0"
    first = next(i for i, n in enumerate(nodes) if n.name.startswith(f"/layers.{layer}/"))
    nodes.insert(first, helper.make_node("Neg", [sin], ["/rotary_edit/Neg_output_0"], name="/rotary_edit/Neg"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    out = Path(clean).parent / dst
    onnx.save(model, str(out))  # beside the clean copy: its initializers point into the same data file
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_bisect_streams_a_copy_that_computes_a_tensor_the_original_lacks(tmp_path: Path, workers: int) -> None:
    """The pieces' inputs take their shapes from the original's streamed baseline; a tensor only the edited copy
    computes has none there and takes it from the copy (ONNX shape inference). Before: ``no shape for
    '/rotary_edit/Neg_output_0', read by layer 1``; at Qwen3-VL-2B widths the same stop for the tensors a chunked
    M-RoPE fault adds before layer 26."""
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16)
    bug = _sin_negated_between_layers(d.clean, Path("sin_negated.onnx"), 1)
    budget = _piece_budget(d.clean, 16, SMALL.hidden)
    r = api.execute("bisect", {"model": str(bug), "reference_model": d.clean, "inputs": d.inputs,
                               "out": str(tmp_path / "b"), "max_memory": str(budget), "workers": workers})
    assert r.timings.get("pieces", 0) >= 2 and r.timings.get("workers", 1) == workers  # the streamed path
    assert r.verdict == "real_bug" and r.first_failing is not None
    assert r.first_failing.op.startswith("/layers.1/self_attn/rotary_"), r.summary


def test_the_hidden_state_of_a_vl_decoder_is_its_embeddings_not_the_stacked_deepstack(real_exports, tmp_path: Path) -> None:
    """Units are sized by what flows between layers; a VL decoder's largest input is ``deepstack_embeds`` (three
    hidden states, added to three layers), which made every unit of Qwen3-VL-2B's decoder look 1.1 GiB heavier.
    Checked on llmexport's real Qwen3-VL decoder (inputs as the runtime builds them) and on the VL export builder's."""
    from qnn_debug.llm.onnx_export import prepare_model
    from qnn_debug.localise.stream_baseline import hidden_bytes
    from qnn_debug_testkit import real_faults as F
    from qnn_debug_testkit.vl import VLExportRequest, build_vl_export

    real = F.copy_export(real_exports("qwen3_vl", "a", "onnx"), tmp_path / "real")
    made = prepare_model(real / "onnx" / "llm.onnx")
    built = Path(build_vl_export(tmp_path / "built", VLExportRequest(mnn=False)).dir) / "onnx" / "llm_inputs.npz"
    for path in (made.inputs, built):
        feeds = dict(np.load(str(path)))
        assert feeds["deepstack_embeds"].nbytes > feeds["input_ids"].nbytes  # the largest input is not the stream
        assert hidden_bytes(feeds) == feeds["input_ids"].nbytes
    vision = dict(np.load(str(Path(built).with_name("visual_inputs.npz"))))
    assert hidden_bytes(vision) == max(v.nbytes for v in vision.values())  # no embeddings input: the largest
