"""A decoder's ``logits_index`` becomes the constant it is fed, on every form of decoder graph users bring.

Before: the preparation step folded it only for llmexport's dynamic graphs fed by the tool's own inputs. A graph
exported with fixed shapes (the VL export builder's ``llm.onnx``, the tiny decoder), or a real llmexport graph fed
an ``--inputs`` .npz that holds ``logits_index`` (as the runtime's own inputs do), kept it as an input: QNN refused
the head's Slice with everything after it, and ``diagnose`` stopped with exit 3 ("Cannot get shape").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.llm.onnx_export import PREFILL_SUFFIX, prepare_model
from qnn_debug_testkit import real_faults as F
from qnn_debug_testkit.tiny_graph import (
    GraphFaults,
    TinyQwen3Config,
    build_graph,
    make_weights,
    prefill_inputs,
)
from test_real_export_tools import _cli  # the CLI's --json answer (exit 0 or 1)


def _tiny_pair(tmp: Path, index: int) -> tuple[Path, Path, Path]:
    """The tiny Qwen3 decoder at fixed shapes with ``logits_index`` an input (as written), rotary broken in layer 1."""
    cfg = TinyQwen3Config(layers=2, hidden=64, intermediate=128)
    w = make_weights(cfg)
    feeds = prefill_inputs(cfg, w, [int(i) for i in np.random.default_rng(5).integers(0, 256, size=24)])
    feeds["logits_index"] = np.asarray([index], np.int32)
    onnx.save(build_graph(cfg, w, seq_len=24), str(tmp / "llm.onnx"))
    onnx.save(build_graph(cfg, w, seq_len=24, faults=GraphFaults(wrong_rotary_layer=1)), str(tmp / "llm_bug.onnx"))
    np.savez(tmp / "prefill.npz", **feeds)  # type: ignore[arg-type]
    return tmp / "llm.onnx", tmp / "llm_bug.onnx", tmp / "prefill.npz"


@pytest.mark.parametrize("index", [-1, 3])
def test_a_fixed_shape_decoder_is_read_through_a_copy_with_the_fed_index(tmp_path: Path, index: int) -> None:
    clean, _bug, inputs = _tiny_pair(tmp_path, index)
    p = prepare_model(clean, inputs=str(inputs))
    graph = onnx.load(p.model, load_external_data=False)
    assert p.model.endswith(PREFILL_SUFFIX) and "logits_index" not in [i.name for i in graph.graph.input]
    assert any(f"logits_index fixed to {index}" in n for n in p.notes), p.notes
    assert p.inputs is not None and "logits_index" not in np.load(p.inputs).files  # the rest fed as they were
    assert np.array_equal(np.load(p.inputs)["input_ids"], np.load(inputs)["input_ids"])
    import onnxruntime as ort

    feeds = dict(np.load(inputs))
    want = ort.InferenceSession(str(clean)).run(None, feeds)[0]
    feeds.pop("logits_index")
    got = ort.InferenceSession(p.model).run(None, feeds)[0]
    assert np.array_equal(want, got)  # the same logits: the constant is the value fed


def test_the_copy_is_rewritten_when_the_fed_index_changes(tmp_path: Path) -> None:
    clean, _bug, inputs = _tiny_pair(tmp_path, -1)
    first = prepare_model(clean, inputs=str(inputs))
    assert any("written beside" in n for n in first.notes)
    again = prepare_model(clean, inputs=str(inputs))
    assert any("written earlier" in n and "logits_index fixed to -1" in n for n in again.notes), again.notes
    np.savez(inputs, **{**dict(np.load(inputs)), "logits_index": np.asarray([0], np.int32)})
    changed = prepare_model(clean, inputs=str(inputs))
    assert any("logits_index fixed to 0" in n for n in changed.notes), changed.notes
    assert changed.inputs != first.inputs


def test_a_shape_for_logits_index_keeps_it_an_input_and_a_bad_one_is_a_typed_error(tmp_path: Path) -> None:
    clean, _bug, inputs = _tiny_pair(tmp_path, -1)
    kept = prepare_model(clean, shapes={"logits_index": [1]}, inputs=str(inputs))
    assert kept.model == str(clean)
    np.savez(inputs, **{**dict(np.load(inputs)), "logits_index": np.asarray([0.5, 1.0], np.float32)})
    with pytest.raises(BadInputError) as e:
        prepare_model(clean, inputs=str(inputs))
    assert "logits_index in prefill.npz is float32 [2]" in e.value.message and "np.asarray([-1]" in (e.value.hint or "")


def test_bisect_runs_on_a_fixed_shape_tiny_decoder_with_its_logits_index(tmp_path: Path) -> None:
    clean, bug, inputs = _tiny_pair(tmp_path, -1)
    r = _cli("bisect", str(bug), "--reference-model", str(clean), "--inputs", str(inputs), "--no-mnn-gate",
             "--out", str(tmp_path / "bisect"))
    assert r["verdict"] == "real_bug" and r["first_failing"]["op"] == "/layers.1/self_attn/rotary_q/Concat", r
    assert any("logits_index fixed to -1" in w for w in r["warnings"]), r["warnings"]


def test_diagnose_runs_on_the_vl_export_builders_fixed_shape_decoder(tmp_path: Path) -> None:
    from qnn_debug_testkit.vl import VLExportRequest, build_vl_export

    clean = Path(build_vl_export(tmp_path / "Qwen3-VL-clean", VLExportRequest(mnn=False)).dir)
    bug = Path(build_vl_export(tmp_path / "Qwen3-VL-bug", VLExportRequest(mnn=False, fault="mrope_chunked")).dir)
    inputs = bug / "onnx" / "llm_inputs.npz"  # the builder's runtime inputs: logits_index among them
    assert "logits_index" in np.load(inputs).files
    d = _cli("diagnose", str(bug / "onnx" / "llm.onnx"), "--reference-model", str(clean / "onnx" / "llm.onnx"),
             "--inputs", str(inputs), "--out", str(tmp_path / "diag"))
    assert d["compare"]["verdict"]["kind"] == "real_bug", d
    assert d["compare"]["first_failing"]["op"] == "/layers.0/self_attn/rotary_q/Mul"
    assert any("logits_index fixed to -1" in w for w in d["warnings"]), d["warnings"]


@pytest.mark.slow
def test_diagnose_on_a_real_llm_onnx_fed_inputs_that_hold_logits_index(real_exports: Any, tmp_path: Path) -> None:
    """A real llmexport graph with the user's inputs (logits_index among them, as the runtime's inputs have it)."""
    clean = F.copy_export(real_exports("qwen3", "b", "onnx"), tmp_path / "clean")
    fault = F.rotary_without_neg(real_exports("qwen3", "b", "onnx"), tmp_path / "faulted", 1)
    made = prepare_model(clean / "onnx" / "llm.onnx", shapes={})  # the runtime's inputs, which the tool can build
    assert made.inputs is not None
    inputs = tmp_path / "runtime_inputs.npz"
    np.savez(inputs, **dict(np.load(made.inputs)), logits_index=np.asarray([-1], np.int32))
    d = _cli("diagnose", fault.file, "--reference-model", str(clean / "onnx" / "llm.onnx"), "--inputs", str(inputs),
             "--out", str(tmp_path / "diag"))
    assert d["compare"]["verdict"]["kind"] == "real_bug", d
    assert d["compare"]["first_failing"]["op"] == fault.op
    assert any("logits_index fixed to -1" in w for w in d["warnings"]), d["warnings"]
