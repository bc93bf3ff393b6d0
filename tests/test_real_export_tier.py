"""The real-export tier itself: MNN's llmexport writes what the other real-export tests rely on.

Checks the folders against what llmexport is known to write (custom ``FusedAttention`` per layer, dynamic
``seq_len``, M-RoPE and deepstack inputs for VL, a plain-ONNX ``visual.onnx`` with exact GELU), and that the
cache is keyed on what built it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx
import pytest

import real_exports as tier

pytestmark = pytest.mark.real_export


def _graph(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize("model", tier.MODELS)
def test_qwen3_onnx_is_llmexports(real_exports, model: str) -> None:
    out = real_exports("qwen3", model, "onnx")
    info = tier.toy_info("qwen3", model)
    g = _graph(out / "onnx" / "llm.onnx")
    ops = Counter(n.op_type for n in g.graph.node)
    domains = {n.domain for n in g.graph.node if n.op_type == "FusedAttention"}
    assert ops["FusedAttention"] == info["num_hidden_layers"] and domains == {"LlmExporter"}
    inputs = {i.name: i for i in g.graph.input}
    assert set(inputs) >= {"input_ids", "attention_mask", "position_ids", "logits_index"}
    hidden = info["hidden_size"]
    seq, one, h = _dims(inputs["input_ids"])
    assert isinstance(seq, str) and one == 1 and h == hidden  # dynamic seq_len, embeddings in
    assert inputs["position_ids"].type.tensor_type.elem_type == onnx.TensorProto.INT32
    assert all(len(n.input) == 5 for n in g.graph.node if n.op_type == "Slice")
    cfg = json.loads((out / "llm_config.json").read_text())
    assert cfg["hidden_size"] == hidden and cfg["layer_nums"] == info["num_hidden_layers"]
    assert (out / "tokenizer.mtok").is_file() and (out / "embeddings_bf16.bin").is_file()


@pytest.mark.parametrize("model", tier.MODELS)
def test_qwen3_vl_onnx_has_mrope_deepstack_and_visual(real_exports, model: str) -> None:
    out = real_exports("qwen3_vl", model, "onnx")
    info = tier.toy_info("qwen3_vl", model)
    llm = _graph(out / "onnx" / "llm.onnx")
    inputs = {i.name: _dims(i) for i in llm.graph.input}
    assert inputs["position_ids"][0] == 3 and inputs["deepstack_embeds"][0] == 3
    assert inputs["deepstack_embeds"][-1] == info["hidden_size"]
    visual = _graph(out / "onnx" / "visual.onnx")
    vops = Counter(n.op_type for n in visual.graph.node)
    assert {i.name for i in visual.graph.input} == {"patches", "position_ids", "attention_mask", "idx_tensor",
                                                   "weight_tensor"}
    assert [o.name for o in visual.graph.output] == ["image_embeds", "deepstack_feature"]
    vision = info["vision"]
    assert isinstance(vision, dict)
    # blocks use the tanh GELU of the config; the patch merger and each deepstack merger the exact one (Erf)
    assert vops["Tanh"] == vision["depth"] and vops["Erf"] == 1 + len(vision["deepstack_visual_indexes"])
    cfg = json.loads((out / "llm_config.json").read_text())
    assert cfg["is_mrope"] and cfg["has_deepstack"] and cfg["image_pad"] == info["token_ids"]["<|image_pad|>"]


@pytest.mark.parametrize(("kind", "export", "bits"), [("qwen3", "mnn", 4), ("qwen3", "mnn8", 8),
                                                      ("qwen3", "mnn_npu", 4), ("qwen3_vl", "mnn", 4)])
def test_mnn_folders(real_exports, kind: str, export: str, bits: int) -> None:
    out = real_exports(kind, "a", export)
    for name in ("llm.mnn", "llm.mnn.weight", "llm_config.json", "config.json", "tokenizer.mtok", "export_args.json"):
        assert (out / name).is_file(), name
    args = json.loads((out / "export_args.json").read_text())
    assert args["quant_bit"] == bits and args["generate_for_npu"] == (export == "mnn_npu")
    if kind == "qwen3_vl":
        assert (out / "visual.mnn").is_file()


def test_cache_is_reused_and_keyed_on_the_builder(real_exports, tmp_path: Path, monkeypatch) -> None:
    first = real_exports("qwen3", "a", "onnx")
    stamp = (first / "onnx" / "llm.onnx").stat().st_mtime_ns
    assert tier.real_export("qwen3", "a", "onnx") == first
    assert (first / "onnx" / "llm.onnx").stat().st_mtime_ns == stamp  # not rebuilt
    key = tier.cache_key()
    edited = tmp_path / "real_export_build.py"
    edited.write_text(tier.BUILDER.read_text() + "\n# edited\n")
    monkeypatch.setattr(tier, "BUILDER", edited)
    assert tier.cache_key() != key


def test_unknown_model_is_a_clear_error() -> None:
    with pytest.raises(tier.RealExportError, match="no toy model"):
        tier.real_export("qwen3", "z", "onnx")
    with pytest.raises(tier.RealExportError, match="no export"):
        tier.real_export("qwen3", "a", "tflite")  # type: ignore[arg-type]


def test_a_failed_build_is_an_error_with_the_log_tail(tmp_path: Path, monkeypatch) -> None:
    broken = tmp_path / "real_export_build.py"
    broken.write_text("import sys\nprint('transformers says: no such config field')\nsys.exit(3)\n")
    monkeypatch.setattr(tier, "BUILDER", broken)
    monkeypatch.setattr(tier, "CACHE", tmp_path / "cache")
    with pytest.raises(tier.RealExportError, match=r"(?s)exit 3.*no such config field"):
        tier.real_export("qwen3", "a", "onnx")
