"""The tools on the same toy Qwen3 exported by ``torch.onnx.export`` (TorchScript, TorchScript fp16, dynamo).

Masks, rotary and RMSNorm as transformers writes them (eager attention: an additive ``finfo(float32).min``
causal mask built with ``Where``; rotate-half with ``Neg``; RMSNorm as ``Pow``/``ReduceMean``/``Sqrt``/``Div``),
on the HTP simulator. What the tools get right is asserted; what they get wrong today is a strict xfail naming
the product change it needs (it fails loudly the day the product is fixed, so the marker comes off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

import real_exports as tier
from qnn_debug.cli import app
from qnn_debug_testkit import real_faults as F

pytestmark = pytest.mark.real_export
runner = CliRunner()


def _inputs(path: Path, model: str) -> Path:
    vocab = int(tier.toy_info("qwen3", model)["vocab_size"])  # type: ignore[call-overload]
    ids = np.random.default_rng(len(model)).integers(8, vocab - 8, (1, tier.TORCH_SEQ)).astype(np.int64)
    np.savez(path, input_ids=ids, attention_mask=np.ones_like(ids))
    return path


def _cli(*args: str, ok: tuple[int, ...] = (0, 1)) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code in ok, res.output
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.parametrize(("model", "flavour"), [("a", "ts"), ("b", "ts"), ("a", "dynamo")])
def test_baseline_trusts_the_fp32_torch_exports(torch_exports, tmp_path: Path, model: str, flavour: str) -> None:
    path = torch_exports("qwen3", model, flavour)
    g = onnx.load(str(path), load_external_data=False)
    assert {n.op_type for n in g.graph.node} >= {"Neg", "Pow", "ReduceMean", "Softmax"}
    _cli("baseline", str(path), "--inputs", str(_inputs(tmp_path / "in.npz", model)), "--out", str(tmp_path / "b"))
    doc = json.loads((tmp_path / "b" / "baseline.json").read_text())
    assert doc["trusted"], doc["sentence"]
    assert doc["gate"]["arithmetic"] == "fp32" and doc["gate"]["outputs"][0]["limit_rule"] == "fp32"
    assert doc["gate"]["outputs"][0]["fp16_own_rel_error"] is None


@pytest.mark.parametrize(("model", "layer"), [("a", 1), ("b", 2)])
def test_localise_blocks_names_the_layer_and_op_of_a_broken_rotary_in_a_torchscript_export(
        torch_exports, tmp_path: Path, model: str, layer: int) -> None:
    clean = torch_exports("qwen3", model, "ts")
    bug = F.torch_rotary_without_neg(clean, tmp_path / "bug.onnx", layer)
    _, doc = _cli("localise-blocks", bug.file, "--reference-model", str(clean), "--inputs",
                  str(_inputs(tmp_path / "in.npz", model)), "--out", str(tmp_path / "blocks"))
    layers = [b["bad"] for b in doc["blocks"] if not b.get("label")]
    assert layers == [i == layer for i in range(len(layers))], doc["blocks"]
    assert doc["verdict"] == "real_bug" and doc["first_failing"]["op"] == bug.op
    assert bug.op.endswith(f"/layers.{layer}/self_attn/Concat")


def test_diagnose_names_the_broken_rotary_not_the_mask_fill(torch_exports, tmp_path: Path) -> None:
    clean = torch_exports("qwen3", "a", "ts")
    bug = F.torch_rotary_without_neg(clean, tmp_path / "bug.onnx", 1)
    _cli("diagnose", bug.file, "--reference-model", str(clean), "--inputs",
                  str(_inputs(tmp_path / "in.npz", "a")), "--out", str(tmp_path / "d"))
    verdict = json.loads((tmp_path / "d" / "report" / "compare.json").read_text())["verdict"]
    assert verdict["kind"] == "real_bug" and verdict["evidence"]["op"] == bug.op, verdict["summary"]


def test_diagnose_on_a_dynamo_export_is_a_typed_refusal_naming_the_op_qnn_lacks(torch_exports, tmp_path: Path) -> None:
    """dynamo lowers the mask's advanced indexing to GatherND, which the QNN EP cannot build on HTP: the tool says
    so as a typed error (exit 3) instead of falling back to CPU."""
    path = torch_exports("qwen3", "a", "dynamo")
    assert any(n.op_type == "GatherND" for n in onnx.load(str(path)).graph.node)
    code, doc = _cli("diagnose", str(path), "--inputs", str(_inputs(tmp_path / "in.npz", "a")), "--out",
                     str(tmp_path / "d"), ok=(3,))
    assert code == 3 and "GatherND" in json.dumps(doc), doc


@pytest.mark.parametrize("model", ["a", "b"])
def test_baseline_trusts_the_fp16_torchscript_export_under_the_fp16_limit(torch_exports, tmp_path: Path,
                                                                         model: str) -> None:
    """ORT computes the fp16 export in fp16, MNN CPU in fp32: they differ by the model's own fp16 rounding (~6e-4,
    over the fp32 limit of a tenth of the floor), which the gate measures on the graph lifted to fp32."""
    path = torch_exports("qwen3", model, "ts_fp16")
    _cli("baseline", str(path), "--inputs", str(_inputs(tmp_path / "in.npz", model)), "--out", str(tmp_path / "b"))
    doc = json.loads((tmp_path / "b" / "baseline.json").read_text())
    assert doc["trusted"], doc["sentence"]
    gate, (out,) = doc["gate"], doc["gate"]["outputs"]
    assert gate["arithmetic"] == "fp16" and out["limit_rule"] == "fp16", gate
    assert out["rel_error"] > 0.1 * out["floor_rel_error"]  # the fp32 rule would not trust it
    assert out["rel_error"] <= out["limit"] == pytest.approx(max(2.0 ** -11, 2 * out["fp16_own_rel_error"]))
    assert out["fp32_lift_rel_error"] < 1e-5  # MNN CPU computes the fp16 graph in fp32
    assert "float16 initializers" in gate["limit_why"] and "Casts to float16" in gate["limit_why"]
    assert "fp16 limit" in doc["sentence"]
    _, res = _cli("baseline", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "user"),
                  "--no-mnn-gate", "--mnn-model", str(tmp_path / "b" / "mnn_cpu" / "model.mnn"))
    user = res["report"]["mnn_model"]["gate"]  # the user's .mnn alone (no converted one): the same fp16 limit
    assert user["status"] == "passed" and user["outputs"][0]["limit_rule"] == "fp16", user
    assert "within the fp16 limit" in res["report"]["sentence"]


@pytest.mark.parametrize("model", ["a", "b"])
def test_fp16_limit_still_fails_an_mnn_of_another_model(torch_exports, tmp_path: Path, model: str) -> None:
    """What the gate is for: MNN CPU running another model than ONNX Runtime. The user's .mnn of the same fp16
    export with layer 1's rotary broken, or one weight 1% off, still fails the fp16 limit."""
    clean = torch_exports("qwen3", model, "ts_fp16")
    feeds = _inputs(tmp_path / "in.npz", model)
    bugs = [F.torch_rotary_without_neg(clean, tmp_path / "rot" / "bug.onnx", 1),
            F.torch_weight_scaled(clean, tmp_path / "w" / "bug.onnx", 1, 1.01)]
    for bug in bugs:
        folder = Path(bug.folder)
        _cli("baseline", bug.file, "--inputs", str(feeds), "--out", str(folder / "base"))
        _, res = _cli("baseline", str(clean), "--inputs", str(feeds), "--out", str(folder / "gate"),
                      "--mnn-model", str(folder / "base" / "mnn_cpu" / "model.mnn"))
        doc = res["report"]
        assert doc["trusted"], doc["sentence"]  # the converted .mnn: the reference itself is fine
        gate, (out,) = doc["mnn_model"]["gate"], doc["mnn_model"]["gate"]["outputs"]
        assert gate["status"] == "failed" and out["limit_rule"] == "fp16", (bug.detail, gate)
        assert out["rel_error"] > 1.2 * out["limit"], (bug.detail, out)
        assert "disagrees with ONNX Runtime" in doc["sentence"]
