"""localise-blocks, bisect and diagnose on llmexport's real ``llm.onnx`` / ``visual.onnx`` with faults injected.

The folders are MNN's own export of random-weight toy Qwen3 / Qwen3-VL models (``LlmExporter::FusedAttention``,
dynamic ``seq_len``: the tools prepare the graph themselves); each fault edits one place of a copy
(``qnn_debug_testkit.real_faults``) and the clean copy is the reference model. Before the real graphs could be
loaded every one of these runs stopped at the dynamic ``seq_len`` or at ``FusedAttention``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug_testkit import real_faults as F

pytestmark = pytest.mark.real_export
runner = CliRunner()


def _cli(*args: str, ok: tuple[int, ...] = (0, 1)) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code in ok, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _clean(real_exports, tmp: Path, kind: str, model: str) -> Path:
    """A copy of the ONNX export (the tools write their prepared graph beside llm.onnx: never in the cache)."""
    name = "Qwen3-VL-clean" if kind == "qwen3_vl" else "Qwen3-clean"
    return F.copy_export(real_exports(kind, model, "onnx"), tmp / name)


def _blocks(doc: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(b.get("label") or "layer", bool(b["bad"])) for b in doc["blocks"]]


def _bad_layers(doc: dict[str, Any]) -> list[bool]:
    return [bool(b["bad"]) for b in doc["blocks"] if not b.get("label")]


@pytest.mark.parametrize("model", ["a", "b"])
def test_localise_blocks_on_a_clean_real_llm_onnx_finds_nothing(real_exports, tmp_path: Path, model: str) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3", model)
    doc = _cli("localise-blocks", str(clean / "onnx" / "llm.onnx"), "--out", str(tmp_path / "lb"))
    assert doc["verdict"] == "ok" and doc["fp16_range"] is None, doc["summary"]


@pytest.mark.parametrize(("model", "layer"), [("a", 1), ("b", 2)])
def test_localise_blocks_names_the_layer_and_op_of_a_broken_rotary(real_exports, tmp_path: Path, model: str,
                                                                   layer: int) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3", model)
    bug = F.rotary_without_neg(clean, tmp_path / "Qwen3-rotary", layer)
    doc = _cli("localise-blocks", bug.file, "--reference-model", str(clean / "onnx" / "llm.onnx"),
               "--out", str(tmp_path / "lb"))
    assert _bad_layers(doc) == [i == layer for i in range(len(_bad_layers(doc)))], _blocks(doc)
    assert doc["verdict"] == "real_bug" and doc["first_failing"]["op"] == bug.op == f"/blocks.{layer}/self_attn/Concat_3"


def test_localise_blocks_names_the_attention_fed_a_zeroed_mask(real_exports, tmp_path: Path) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3", "a")
    bug = F.mask_zeroed(clean, tmp_path / "Qwen3-mask", 0)
    doc = _cli("localise-blocks", bug.file, "--reference-model", str(clean / "onnx" / "llm.onnx"),
               "--out", str(tmp_path / "lb"))
    assert _bad_layers(doc)[0] and doc["verdict"] == "real_bug", _blocks(doc)
    assert bug.op and doc["first_failing"]["op"].startswith(bug.op)  # inside FusedAttention as the tools lower it


@pytest.mark.parametrize(("model", "layer"), [("a", 0), ("b", 1)])
def test_localise_blocks_calls_massive_activations_an_fp16_range_problem_at_the_next_rmsnorm(
        real_exports, tmp_path: Path, model: str, layer: int) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3", model)
    bug = F.massive_activation(clean, tmp_path / "Qwen3-massive", layer)
    doc = _cli("localise-blocks", bug.file, "--out", str(tmp_path / "lb"))
    assert doc["verdict"] == "precision" and doc["fp16_range"]["op"] == bug.op, doc["summary"]
    assert doc["fp16_range"]["max_abs_ref"] > 65504


def test_localise_blocks_puts_chunked_mrope_sections_in_the_rotary_table(real_exports, tmp_path: Path) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3_vl", "a")
    bug = F.mrope_chunked(clean, tmp_path / "Qwen3-VL-mrope")
    doc = _cli("localise-blocks", bug.folder, "--graph", "llm", "--reference-model", str(clean),
               "--out", str(tmp_path / "lb"))
    assert _blocks(doc)[0] == ("outside the layers, before layer 0", True), _blocks(doc)
    assert doc["verdict"] == "real_bug" and doc["first_failing"]["op"].startswith("/rotary/"), doc["summary"]


def test_localise_blocks_names_the_dropped_deepstack_add(real_exports, tmp_path: Path) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3_vl", "a")
    bug = F.deepstack_dropped(clean, tmp_path / "Qwen3-VL-deepstack", 0)
    doc = _cli("localise-blocks", bug.folder, "--graph", "llm", "--reference-model", str(clean),
               "--out", str(tmp_path / "lb"))
    first_bad = next(label for label, bad in _blocks(doc) if bad)
    assert first_bad == "outside the layers, between layer 0 and layer 1", _blocks(doc)
    assert doc["verdict"] == "real_bug" and doc["first_failing"]["op"] == bug.op == "/Add"


def test_localise_blocks_stays_quiet_on_a_vision_fault_below_the_fp16_floor(real_exports, tmp_path: Path) -> None:
    """The toy vision tower has no q/k norm, so its attention is near uniform at random init and a rotate-half
    without its Neg moves visual.onnx's outputs by ~73 dB SQNR (ONNX Runtime, clean vs faulted): far below what
    fp16 resolves, so 'ok' is the right answer and a finding would be a false alarm."""
    clean = _clean(real_exports, tmp_path, "qwen3_vl", "a")
    bug = F.visual_rotary_without_neg(clean, tmp_path / "Qwen3-VL-vrot", 1)
    doc = _cli("localise-blocks", bug.folder, "--graph", "visual", "--reference-model", str(clean),
               "--out", str(tmp_path / "lb"))
    assert len(_bad_layers(doc)) == 3 and doc["verdict"] == "ok", doc["summary"]


@pytest.mark.parametrize("tool", ["bisect", "diagnose"])
def test_bisect_and_diagnose_name_the_broken_rotary_in_the_real_llm_onnx(real_exports, tmp_path: Path,
                                                                        tool: str) -> None:
    clean = _clean(real_exports, tmp_path, "qwen3", "a")
    bug = F.rotary_without_neg(clean, tmp_path / "Qwen3-rotary", 1)
    res = runner.invoke(app, [tool, bug.file, "--reference-model", str(clean / "onnx" / "llm.onnx"),
                              "--out", str(tmp_path / tool), "--json"])
    assert res.exit_code in (0, 1), res.output
    assert bug.op in res.stdout and "real_bug" in res.stdout, res.stdout[-2000:]
