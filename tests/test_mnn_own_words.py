"""MNN's own words reach the user: the real outputs of a host MNN build (fixtures/mnn-host-real) read through
the public entry points — triage, the host target with a double that replays a recorded output and exit
status, llm-check on exports whose Slices MNN's QNN backend refuses, and the op lookup."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import pytest

from conftest import REPO, SHARED
from doubles.fake_phone import python_wrapper
from qnn_debug.triage import triage_log
from qnn_debug.workers import run_worker
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export
from qnn_debug_testkit.tiny_graph import GraphFaults, TinyQwen3Config, build_graph, make_weights

_SHARED_REAL = SHARED / "fixtures" / "mnn-host-real"
REAL = _SHARED_REAL if _SHARED_REAL.is_dir() else REPO / "tests" / "fixtures" / "mnn-host-real"
CLI = [sys.executable, "-m", "qnn_debug"]
SLICE_TENSOR = "/layers.0/self_attn/rotary_q/Slice_1_output_0"


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, dict]:
    run = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=300, cwd=cwd,
                         env={**os.environ, **(env or {})})
    return run.returncode, json.loads(run.stdout)


# --- triage: compilefornpu's exit-0 failure and MNN2QNNModel's SDK-looking one are a refused op ---------------


@pytest.mark.parametrize("log", ["compilefornpu_strided_slice_type91.log", "mnn2qnnmodel_strided_slice_type91.log"])
def test_triage_reads_the_refusal_as_a_failed_conversion(log: str) -> None:
    r = triage_log(REAL / log)
    assert r.category == "unsupported_op_not_registered", (r.category, r.title)
    assert "conversion failed" in r.title
    facts = " ".join(r.facts)
    assert "5 inputs" in facts and "steps" in facts and "exits 0" in facts
    assert not any("if your build says 'Not registered'" in f for f in r.facts), "the creator exists; it declined"
    assert any(s.cli == "qnn-debug op StridedSlice --probe" for s in r.next_steps)


def test_op_lookup_states_the_slice_input_rule() -> None:
    code, doc = _cli("op", "StridedSlice")
    assert code == 0
    assert any("exactly 5 inputs" in f["text"] and "QNNStridedSlice.cpp:219-234" in f["source"] for f in doc["facts"])


# --- the host target: MNN2QNNModel and ModuleBasic replaying real outputs ------------------------------------


@pytest.fixture()
def host(tmp_path: Path) -> dict[str, Path]:
    build = tmp_path / "mnn-build"
    python_wrapper(build / "ModuleBasic.out", "replay_mnn_tool.py")
    sdk = tmp_path / "sdk"
    (sdk / "bin" / "x86_64-linux-clang").mkdir(parents=True)
    return {"build": build, "sdk": sdk, "m2q": python_wrapper(tmp_path / "tools" / "MNN2QNNModel", "replay_mnn_tool.py"),
            "env": tmp_path / "env.json"}


def test_mnn2qnnmodel_refusal_is_named_and_the_sdk_is_passed_on(host: dict[str, Path], mnn_fixtures: Path,
                                                                tmp_path: Path) -> None:
    code, doc = _cli("dump", str(mnn_fixtures / "test.mnn"), "--target", "host", "--soc", "69",
                     "--option", f"mnn_build_dir={host['build']}", "--option", f"mnn2qnn={host['m2q']}",
                     "--option", f"qnn_sdk={host['sdk']}", "--out", str(tmp_path / "run"),
                     env={"REPLAY_MNN_LOG": str(REAL / "mnn2qnnmodel_strided_slice_type91.log"),
                          "REPLAY_ENV_LOG": str(host["env"])})
    assert code == 3 and doc["error"] == "unsupported_nodes", doc
    msg = doc["message"]
    assert "StridedSlice (MNN OpType 91)" in msg and SLICE_TENSOR in msg and "5 inputs" in msg, msg
    assert "check the QNN SDK" not in msg and "steps" in doc["hint"]
    seen = json.loads(host["env"].read_text())
    assert seen["QNN_SDK_ROOT"] == str(host["sdk"].absolute())
    assert seen["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(host["sdk"].absolute() / "lib" / "x86_64-linux-clang")


def _host_run(host: dict[str, Path], mnn_fixtures: Path, tmp_path: Path, log: Path) -> tuple[int, dict]:
    return _cli("run", str(mnn_fixtures / "test.mnn"), "--target", "host", "--testdir", str(mnn_fixtures / "testdir"),
                "--option", f"mnn_build_dir={host['build']}", "--option", f"qnn_sdk={host['sdk']}",
                "--out", str(tmp_path / "run"), cwd=tmp_path,
                env={"REPLAY_MNN_LOG": str(log), "REPLAY_ENV_LOG": str(host["env"])})


def test_modulebasic_crash_after_a_refused_binary_says_so(host: dict[str, Path], mnn_fixtures: Path, tmp_path: Path) -> None:
    code, doc = _host_run(host, mnn_fixtures, tmp_path, REAL / "modulebasic_offline_validate_binary_1000_crash.log")
    assert code == 3, doc
    msg = doc["message"]
    assert "SIGSEGV" in msg or "-11" in msg
    assert "Failed to validate binary: 1000" in msg and "MNN went on" in msg, msg
    assert "Run for 0 time" in doc["details"]["log_tail"], "the lines before the crash are kept"
    # the whole log is kept where the message says (a failed run writes no tensors, but its log stays)
    log = tmp_path / "run" / "logs" / "modulebasic.log"
    assert f"ModuleBasic's log: {log}" in msg and doc["details"]["log"] == str(log), msg
    assert log.read_text() == (REAL / "modulebasic_offline_validate_binary_1000_crash.log").read_text().rstrip("\n") + "\n" \
        or "Run for 0 time" in log.read_text()
    assert json.loads((tmp_path / "run" / "failed.json").read_text())["log"] == "logs/modulebasic.log"
    assert json.loads(host["env"].read_text())["QNN_SDK_ROOT"] == str(host["sdk"].absolute()), \
        "--option qnn_sdk reaches ModuleBasic too"


def test_a_build_without_plugins_is_said_plainly(host: dict[str, Path], mnn_fixtures: Path, tmp_path: Path) -> None:
    # Constructed log: ModuleBasic's banner from the real fixture, then the two lines MNN prints when a build
    # without plugin support meets an offline model (CPUPlugin.cpp:92's message, ModuleBasic's "Error in forward").
    banner = (REAL / "modulebasic_offline_validate_binary_1000_crash.log").read_text().splitlines()[:13]
    log = tmp_path / "no_plugin.log"
    log.write_text("\n".join([*banner, "Plugin is not supported. Please recompile with `MNN_WITH_PLUGIN` enabled.",
                              "Error in forward", "rc=0"]) + "\n")
    code, doc = _host_run(host, mnn_fixtures, tmp_path, log)
    assert code == 3, doc
    assert "no outputs" in doc["message"] and "MNN_WITH_PLUGIN" in doc["message"], doc["message"]
    assert "-DMNN_WITH_PLUGIN=ON" in doc["hint"]
    kept = tmp_path / "run" / "logs" / "modulebasic.log"
    assert str(kept) in doc["message"] and "Plugin is not supported" in kept.read_text()


# --- llm-check: refused Slices and the empty compiled model ---------------------------------------------------


def _export_with_4_input_slices(out: Path, cfg: TinyQwen3Config) -> Path:
    """A tiny export whose llm.mnn comes from ONNX Slices without `steps` (the form MNN's QNN refuses)."""
    build_tiny_export(out, TinyExportRequest(config=cfg))
    graph = build_graph(cfg, make_weights(cfg), attention="fused", seq_len=None, faults=GraphFaults())
    for node in graph.graph.node:
        if node.op_type == "Slice" and len(node.input) == 5:
            del node.input[4]
    work = Path(tempfile.mkdtemp(dir=out.parent))
    onnx.save(graph, str(work / "m.onnx"))
    run_worker("qnn_debug_testkit.convert_worker", {"onnx": str(work / "m.onnx"), "out": str(out / "llm.mnn"), "work": str(work),
                                                "ranges": None, "index_quant": False, "mul_from_operand": None,
                                                "weight_bits": 8}, timeout=300, what="MNN converter")
    shutil.rmtree(work)
    return out


@pytest.mark.parametrize("cfg", [TinyQwen3Config(), TinyQwen3Config(layers=3, hidden=192, heads=6, kv_heads=2,
                                                                     intermediate=384, vocab=400, seed=5)])
def test_llm_check_names_refused_slices_and_the_tiny_decoder_writes_5(cfg: TinyQwen3Config, tmp_path: Path) -> None:
    clean = build_tiny_export(tmp_path / "clean", TinyExportRequest(config=cfg))
    code, doc = _cli("llm-check", clean.dir)
    assert code == 0 and "qnn_refused_op_in_npu_segment" not in {f["id"] for f in doc["findings"]}
    refused = _export_with_4_input_slices(tmp_path / "four", cfg)
    code, doc = _cli("llm-check", str(refused))
    assert code == 0
    hit = [f for f in doc["findings"] if f["id"] == "qnn_refused_op_in_npu_segment"]
    assert hit and hit[0]["severity"] == "error" and hit[0]["step"] == 2
    assert all("StridedSlice (OpType 91)" in e and "4 inputs" in e for e in hit[0]["evidence"] if not e.startswith("…"))
    assert len([e for e in hit[0]["evidence"] if "rotary" in e]) >= 2 * cfg.layers or len(hit[0]["evidence"]) == 21
    assert any("QNNStridedSlice.cpp:219-234" in s for s in hit[0]["sources"])


def test_llm_check_says_the_compiled_model_is_empty(tmp_path: Path) -> None:
    export = build_tiny_export(tmp_path / "e", TinyExportRequest())
    qnn = tmp_path / "cache"
    (qnn / "qnn").mkdir(parents=True)
    shutil.copyfile(REAL / "compilefornpu_qnn.json", qnn / "qnn.json")
    for content in (b"", b"\x00" * 1024):  # what compilefornpu left after the refusal: a file with no graph
        (qnn / "qnn" / "llm.mnn").write_bytes(content)
        code, doc = _cli("llm-check", export.dir, "--qnn-dir", str(qnn))
        assert code == 0, doc
        empty = [f for f in doc["findings"] if f["id"] == "compiled_model_empty"]
        assert empty and empty[0]["severity"] == "error" and "exits 0" in empty[0]["consequence"]


def test_modulebasic_testerror_read_with_a_floor_that_misses_its_rule_says_so(host: dict[str, Path], tmp_path: Path,
                                                                             ppocr_det: Path) -> None:
    """PP-OCRv4 det's real host TESTERROR (diff rate 1.0), read by `run --baseline`: the baseline's fp16 floor itself
    misses ModuleBasic's 1 % rule on the mask (~0.03 at 64x64), so the run says a TESTERROR there is expected at
    fp16 even once the Deconvolution is fixed — beside the failure it reports."""
    import numpy as np

    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32))
    code, base = _cli("baseline", str(ppocr_det), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "base"))
    assert code == 0, base
    model = next((tmp_path / "base" / "mnn_cpu").glob("*.mnn"))
    code, doc = _cli("run", str(model), "--target", "host", "--baseline", str(tmp_path / "base"),
                     "--option", f"mnn_build_dir={host['build']}", "--out", str(tmp_path / "run"), cwd=tmp_path,
                     env={"REPLAY_MNN_LOG": str(REAL / "modulebasic_host_fwd5_deconv_relu_bug.log"),
                          "REPLAY_ENV_LOG": str(host["env"])})
    assert code in (0, 1) and doc["status"] == "failed", doc
    said = [w for w in doc["warnings"] if "ModuleBasic's pass rule" in w]
    assert len(said) == 1 and "'sigmoid_0.tmp_0'" in said[0] and "expected even from a correct fp16 run" in said[0]
    assert "the fp16 floor misses ModuleBasic's 1% rule too" in doc["reason"], doc["reason"]
