"""llm-check on real .mnn files made the way llmexport makes them: every injected fault is found by the
check meant to find it, and the clean exports (with activation quantization) give no error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_exports import MODELS, build_all, cases, write_constants
from qnn_debug.errors import BadInputError
from qnn_debug.llm.check import LlmCheckRequest, check_llm_export

EXPECTED = {
    "clean": set(),
    "unregistered_op": {"unregistered_op_in_npu_segment"},
    "index_quant": {"quant_on_integer_tensor"},
    "mul_encoding": {"mul_output_shares_operand_encoding"},
    "wrong_rotary": set(),  # numeric: found by the text/logits comparison, not statically
    "residual_spike": set(),  # numeric: found on the fp16 target
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    return build_all(tmp_path_factory.mktemp("llm-exports"))


@pytest.mark.parametrize(("model", "fault"), cases())
def test_each_fault_is_found_and_nothing_else(exports: dict[tuple[str, str], Path], model: str, fault: str) -> None:
    result = check_llm_export(LlmCheckRequest(export_dir=str(exports[(model, fault)])))
    errors = {f.id for f in result.findings if f.severity == "error"}
    assert errors == EXPECTED[fault], [f.title for f in result.findings]
    for f in result.findings:
        if f.severity == "error":
            assert f.evidence and f.remedy and f.sources and all("alibaba/MNN@" in s for s in f.sources)
    assert result.settings.calibration == "smooth" and result.settings.activation_bits == 16
    assert sum(s.npu for s in result.segments) == MODELS[model][0].layers + 1  # KV Attention breaks at limit 0


def test_evidence_names_the_faulty_layer(exports: dict[tuple[str, str], Path]) -> None:
    rope = check_llm_export(LlmCheckRequest(export_dir=str(exports[("b", "unregistered_op")]))).findings[0]
    assert "/layers.0/" in rope.evidence[0] and "OpType 306" in rope.evidence[0] and "RoPE" in rope.title
    mul = check_llm_export(LlmCheckRequest(export_dir=str(exports[("a", "mul_encoding")]))).findings[0]
    assert len(mul.evidence) == 1 and "/layers.1/mlp/" in mul.evidence[0] and "SwiGLU" in mul.evidence[0]
    idx = check_llm_export(LlmCheckRequest(export_dir=str(exports[("a", "index_quant")]))).findings[0]
    assert any("'position_ids'" in e for e in idx.evidence) and any("Gather" in e for e in idx.evidence)
    assert "3110" in idx.consequence


def test_kv_limit_moves_attention_into_one_segment(exports: dict[tuple[str, str], Path]) -> None:
    r = check_llm_export(LlmCheckRequest(export_dir=str(exports[("a", "clean")]), max_history_token=256))
    assert sum(s.npu for s in r.segments) == 1 and [f.id for f in r.findings] == ["kv_limit"]
    assert r.findings[0].severity == "warning" and "KV length" in r.findings[0].evidence[-1]  # 2048 > 256


def test_config_qnn_and_unrecognised_qnn_dir(exports: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    folder = tmp_path / "with-qnn"
    shutil.copytree(exports[("a", "clean")], folder)
    (folder / "qnn").mkdir()
    (folder / "config_qnn.json").write_text(json.dumps({"llm_model": "qnn/llm.mnn", "llm_weight": "llm.mnn.weight",
                                                        "chunk_limits": [128, 1]}))
    (tmp_path / "other").mkdir()
    r = check_llm_export(LlmCheckRequest(export_dir=str(folder), qnn_dir=str(tmp_path / "other")))
    bad = next(f for f in r.findings if f.id == "config_qnn_inconsistent")
    assert any("qnn/llm.mnn" in e for e in bad.evidence) and any("graph*.bin" in e for e in bad.evidence)
    assert "qnn_dir_unrecognised" in {f.id for f in r.findings}


def test_settings_mask_and_family_findings(exports: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    src = exports[("a", "clean")]
    vl = tmp_path / "Qwen3-VL-2B-Instruct-MNN"
    shutil.copytree(src, vl)
    cfg = json.loads((vl / "llm_config.json").read_text())
    del cfg["attention_mask"]
    (vl / "llm_config.json").write_text(json.dumps(cfg))
    args = json.loads((vl / "export_args.json").read_text())
    args.update(act_sym=True)
    (vl / "export_args.json").write_text(json.dumps(args))
    ids = {f.id for f in check_llm_export(LlmCheckRequest(export_dir=str(vl))).findings}
    assert {"attention_mask_dtype", "family_from_folder_name"} <= ids


def test_generate_llm_qnn_outputs(exports: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    cache = tmp_path / "tmp"
    (cache).mkdir()
    (cache / "qnn.json").write_text(json.dumps({"type": "QNN", "skips": [], "testdir": ["testdir/0", "testdir/1"],
                                                "KVCACHE_SIZE_LIMIT": 0, "cache": "qnn", "graph_name": "graphllm"}))
    write_constants(cache / "testdir" / "0" / "input.mnn", {"input_ids": ([32, 1, 96], "float"),
                                                            "attention_mask": ([1, 1, 32, 32], "int")})
    (cache / "testdir" / "1").mkdir()
    r = check_llm_export(LlmCheckRequest(export_dir=str(exports[("a", "clean")]), qnn_dir=str(cache)))
    ids = {f.id for f in r.findings}
    assert {"testdir_incomplete", "testdir_hidden_mismatch", "testdir_mask_dtype"} <= ids
    assert r.settings.kv_limit_source == "qnn.json KVCACHE_SIZE_LIMIT"


def test_cli_json_and_typed_errors(exports: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "qnn_debug", "llm-check", str(exports[("b", "index_quant")]), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert [f["id"] for f in doc["findings"]] == ["quant_on_integer_tensor"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "llm.mnn").write_bytes(b"\x00" * 64)
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "broken", tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(BadInputError):
            check_llm_export(LlmCheckRequest(export_dir=str(folder)))
    run = subprocess.run([sys.executable, "-m", "qnn_debug", "llm-check", str(tmp_path / "empty"), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and json.loads(run.stdout)["error"] == "bad_input"


def test_settings_inferred_without_export_args(exports: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    folder = tmp_path / "no-args"
    shutil.copytree(exports[("b", "clean")], folder)
    (folder / "export_args.json").unlink()
    st = check_llm_export(LlmCheckRequest(export_dir=str(folder))).settings
    assert st.source.startswith("inferred") and st.activation_bits == 16 and st.activation_symmetric is False
    assert st.quantized_tensors > 0 and "smooth or omni" in (st.calibration or "")
