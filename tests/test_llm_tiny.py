"""The tiny Qwen3-shaped export builder: real ONNX graphs, real .mnn files from MNN's converter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.mnn.model_reader import read_mnn_model
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export, tiny_prefill
from qnn_debug_testkit.tiny_graph import (
    GraphFaults,
    TinyQwen3Config,
    build_graph,
    make_weights,
    prefill_inputs,
)
from qnn_debug_testkit.tiny_tokenizer import decode, encode


def _greedy(model: onnx.ModelProto, cfg: TinyQwen3Config, steps: int) -> list[int]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    w = make_weights(cfg)
    ids = encode("Hello world", cfg.vocab)
    for _ in range(steps):
        ids.append(int(sess.run(["logits"], prefill_inputs(cfg, w, ids))[0].reshape(-1).argmax()))
    return ids


def test_plain_graph_is_a_causal_decoder_with_llmexport_io() -> None:
    cfg = TinyQwen3Config()
    model = build_graph(cfg, make_weights(cfg), seq_len=None)
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "position_ids", "logits_index"]
    assert [o.name for o in model.graph.output] == ["logits", "hidden_states"]
    ops = {n.op_type for n in model.graph.node}
    assert {"Pow", "ReduceMean", "Sqrt", "Div", "Gather", "Softmax", "Sigmoid", "Expand"} <= ops
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    w = make_weights(cfg)
    full = prefill_inputs(cfg, w, list(range(40, 60)))
    full["logits_index"] = np.asarray([0], np.int32)
    part = prefill_inputs(cfg, w, list(range(40, 50)))
    part["logits_index"] = np.asarray([0], np.int32)
    a = sess.run(["logits"], full)[0][0, :10]
    b = sess.run(["logits"], part)[0][0]
    assert np.allclose(a, b, atol=1e-4)  # later tokens never leak into earlier ones


def test_graph_faults_change_numbers_only_where_meant() -> None:
    cfg = TinyQwen3Config(seed=3)
    w = make_weights(cfg)
    clean = _greedy(build_graph(cfg, w), cfg, 10)
    assert clean == _greedy(build_graph(cfg, w), cfg, 10)  # deterministic
    assert _greedy(build_graph(cfg, w, faults=GraphFaults(wrong_rotary_layer=1)), cfg, 10) != clean
    assert build_graph(cfg, w, faults=GraphFaults(residual_spike_layer=0)) is not None


def test_bigger_configs_build_fast() -> None:
    cfg = TinyQwen3Config(layers=8, hidden=256, heads=8, kv_heads=2, intermediate=512, vocab=512)
    model = build_graph(cfg, make_weights(cfg), seq_len=32)
    assert sum(n.op_type == "Softmax" for n in model.graph.node) == 8


def test_tokenizer_round_trip() -> None:
    for text in ["Hello world", "中文 is 的", "x\n\ny"]:
        assert decode(encode(text, 320), 320) == text


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {name: Path(build_tiny_export(root / name, TinyExportRequest(fault=fault, act_quant=True)).dir)
            for name, fault in (("clean", None), ("rope", "unregistered_op"))}


def test_export_folder_matches_llmexport_layout(exports: dict[str, Path]) -> None:
    d = exports["clean"]
    for f in ("llm.mnn", "llm.mnn.weight", "config.json", "llm_config.json", "export_args.json", "tokenizer.txt",
              "embeddings_bf16.bin", "onnx/llm.onnx"):
        assert (d / f).is_file(), f
    model = read_mnn_model(d / "llm.mnn")
    assert [i.name for i in model.inputs] == ["input_ids", "attention_mask", "position_ids", "logits_index"]
    assert sum(op.type_name == "Attention" for op in model.ops) == 2
    assert not any(op.type_name == "Extra" for op in model.ops)
    rope = read_mnn_model(exports["rope"] / "llm.mnn")
    assert [op.type_id for op in rope.ops if op.type_name == "RoPE"] == [306]


def test_onnx_prefill_helper_and_bad_requests(exports: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(BadInputError):
        build_tiny_export(exports["clean"])  # not empty
    with pytest.raises(BadInputError):
        build_tiny_export(tmp_path / "x", TinyExportRequest(fault="wrong_rotary", fault_layer=5))
    r = build_tiny_export(tmp_path / "y", TinyExportRequest(onnx_seq_len=8))
    feeds = tiny_prefill(r, list(range(8)))
    sess = ort.InferenceSession(r.onnx, providers=["CPUExecutionProvider"])
    assert sess.run(["logits"], feeds)[0].shape == (1, 1, 320)
