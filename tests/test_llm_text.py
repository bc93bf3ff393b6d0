"""Text and logits: MNN.llm CPU reference vs another export, a phone's llm_demo (test double) or a given text,
and the garbled-text detector on real garbled outputs from public issues (in-sample and held-out parts)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from doubles.fake_phone import FakePhone, python_wrapper
from qnn_debug.errors import BadInputError
from qnn_debug.llm.garbled import detect_garbled
from qnn_debug.llm.llm_demo import DeviceTextTarget, parse_llm_demo_output
from qnn_debug.llm.text import LlmTextRequest, compare_tokens, llm_text
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export
from qnn_debug_testkit.tiny_graph import TinyQwen3Config

CORPUS = Path(__file__).parent / "fixtures" / "llm_text" / "garbled_corpus.json"
CFG_B = TinyQwen3Config(layers=3, hidden=192, heads=6, kv_heads=2, intermediate=384, vocab=400, seed=5)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llm-text")
    return {name: Path(build_tiny_export(root / name, TinyExportRequest(config=cfg, fault=fault, fault_layer=layer)).dir)
            for name, cfg, fault, layer in (("a", TinyQwen3Config(), None, None),
                                            ("a_rotary", TinyQwen3Config(), "wrong_rotary", 1),
                                            ("b", CFG_B, None, None), ("b_rotary", CFG_B, "wrong_rotary", 0))}


def test_garbled_detector_in_sample_and_held_out() -> None:
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    rates = {}
    for part in ("tuning", "held_out"):
        found = [detect_garbled(x["text"]).garbled for x in corpus[part]["garbled"]]
        false = [detect_garbled(x["text"]).garbled for x in corpus[part]["normal"]]
        rates[part] = (sum(found) / len(found), sum(false) / len(false))
    assert rates["tuning"] == (1.0, 0.0)
    assert rates["held_out"][1] == 0.0 and rates["held_out"][0] >= 0.6, rates  # measured 3/5 held-out garbled found


@pytest.mark.parametrize("model", ["a", "b"])
def test_reference_against_a_faulty_export_finds_the_divergence(exports: dict[str, Path], tmp_path: Path,
                                                                 model: str) -> None:
    same = llm_text(LlmTextRequest(export_dir=str(exports[model]), target_export=str(exports[model]),
                                   max_new_tokens=10, out=str(tmp_path / "same")))
    assert same.verdict == "match" and same.comparison is not None and same.comparison.top1_agreement == 1.0
    assert same.comparison.logits_sqnr_min_db is not None and same.comparison.logits_sqnr_min_db > 100
    bad = llm_text(LlmTextRequest(export_dir=str(exports[model]), target_export=str(exports[f"{model}_rotary"]),
                                  max_new_tokens=10, out=str(tmp_path / "bad")))
    c = bad.comparison
    assert bad.verdict == "diverged" and c is not None and c.logits_sqnr_median_db is not None
    assert c.logits_sqnr_median_db < 25 and c.top1_agreement < 1.0
    assert len(bad.reference.tokens) == 10 and (tmp_path / "bad" / "llm_text.json").is_file()


def test_phone_llm_demo_over_adb(exports: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    model_dir = "/data/local/tmp/tiny-qwen3"
    shutil.copytree(exports["a_rotary"], phone.device(model_dir))
    shutil.copy(phone.device(model_dir) / "config.json", phone.device(model_dir) / "config_qnn.json")
    python_wrapper(phone.device(model_dir) / "llm_demo", "fake_llm_demo.py")
    device = DeviceTextTarget(model_dir=model_dir)
    r = llm_text(LlmTextRequest(export_dir=str(exports["a"]), device=device, max_new_tokens=10, out=str(tmp_path / "o1")))
    assert r.target is not None and r.target.demo is not None and r.target.demo.decode_tokens
    assert r.comparison is not None and r.comparison.first_divergence is not None and r.verdict == "diverged"
    greedy = json.loads((phone.device(model_dir) / "qnn-debug-greedy-config_qnn.json").read_text())
    assert greedy["sampler_type"] == "greedy" and json.loads((phone.device(model_dir) / "config_qnn.json").read_text())["sampler_type"] == "mixed"
    assert any("llm_demo" in " ".join(c) for c in phone.calls())
    (phone.device(model_dir) / "FAKE_GARBLE").write_text("")
    g = llm_text(LlmTextRequest(export_dir=str(exports["a"]), device=device, max_new_tokens=10, out=str(tmp_path / "o2")))
    assert g.verdict == "garbled" and g.target is not None and g.target.garbled is not None
    assert any("'!'" in reason for reason in g.target.garbled.reasons)


def test_llm_demo_output_parsing_and_errors() -> None:
    out = ("config path is /x/config.json\nThe device supports: i8sdot:1\nprompt file is /x/p.txt\nHello there!\n\n"
           "#################################\nprompt tokens num = 7\ndecode tokens num = 3\n")
    parsed = parse_llm_demo_output(out, "/x/p.txt")
    assert parsed.text == "Hello there!" and parsed.prompt_tokens == 7 and parsed.decode_tokens == 3
    from qnn_debug.errors import DeviceError

    with pytest.raises(DeviceError):
        parse_llm_demo_output("config path is /x\nSegmentation fault\n")


def test_compare_tokens_near_tie_and_logits() -> None:
    logits = np.zeros((3, 5), np.float32)
    logits[:, 1] = 1.0
    logits[1, 2] = 0.9
    c = compare_tokens([1, 1, 1], [1, 2, 1], logits, logits)
    assert c.first_divergence is not None and c.first_divergence.step == 1 and c.first_divergence.near_tie
    assert c.agreeing_prefix == 1 and abs(c.top1_agreement - 2 / 3) < 1e-6 and c.logits_sqnr_min_db == 200.0


def test_cli_with_text_target_and_typed_errors(exports: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "phone.txt").write_text("!!!!!!!! ???? !!!!!!!!", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "qnn_debug", "llm-text", str(exports["b"]), "--out", str(tmp_path / "o"),
                          "--target-text-file", str(tmp_path / "phone.txt"), "--max-new-tokens", "6", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["verdict"] == "garbled" and doc["comparison"]["first_divergence"]["step"] == 0
    with pytest.raises(BadInputError):
        llm_text(LlmTextRequest(export_dir=str(exports["b"]), out=str(tmp_path / "o")))  # not empty
    with pytest.raises(BadInputError):
        llm_text(LlmTextRequest(export_dir=str(tmp_path / "nope"), out=str(tmp_path / "o3")))
    run = subprocess.run([sys.executable, "-m", "qnn_debug", "llm-text", str(exports["b"]), "--out", str(tmp_path / "o4"),
                          "--target-text-file", str(tmp_path / "missing.txt"), "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and json.loads(run.stdout)["error"] == "bad_input"


def test_runtime_refusal_is_a_typed_error_with_mnn_words(tmp_path: Path) -> None:
    from qnn_debug.errors import TargetError

    export = build_tiny_export(tmp_path / "rope", TinyExportRequest(fault="unregistered_op"))
    with pytest.raises(TargetError) as err:
        llm_text(LlmTextRequest(export_dir=export.dir, max_new_tokens=2, out=str(tmp_path / "o")))
    # the wheel's CPU RoPE only takes C4-packed q/k; the runtime then crashes (measured: SIGSEGV)
    assert "C4 packed" in err.value.message and (tmp_path / "o" / "reference" / "mnn_llm.log").is_file()


def test_phone_llm_logits_diff_cpu_vs_npu_config(exports: dict[str, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    model_dir = "/data/local/tmp/tiny-qwen3"
    folder = phone.device(model_dir)
    shutil.copytree(exports["b"], folder)
    (folder / "qnn").mkdir()
    for name in ("llm.mnn", "llm.mnn.weight"):  # the "NPU" graph: the faulty export's model in the qnn/ slot
        shutil.copy(exports["b_rotary"] / name, folder / "qnn" / name)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(llm_model="qnn/llm.mnn", llm_weight="qnn/llm.mnn.weight")
    (folder / "config_qnn.json").write_text(json.dumps(cfg))
    python_wrapper(folder / "llm_logits_diff", "fake_llm_logits_diff.py")
    r = llm_text(LlmTextRequest(export_dir=str(exports["b"]), device=DeviceTextTarget(model_dir=model_dir),
                                device_logits_diff=True, max_new_tokens=8, out=str(tmp_path / "o")))
    d = r.device_diff
    assert d is not None and len(d.steps) == 8 and d.worst_max_abs_diff is not None and d.worst_max_abs_diff > 0.1
    assert r.verdict in ("diverged", "near_tie_flip") and d.first_disagreement is not None
    assert r.comparison is not None and r.comparison.top1_agreement == 1.0  # phone CPU == this machine's CPU
    from qnn_debug.errors import DeviceError
    from qnn_debug.llm.logits_diff import parse_logits_diff

    with pytest.raises(DeviceError):
        parse_logits_diff("load failed\n", "a", "b")
