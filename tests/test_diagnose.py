"""``qnn-debug diagnose``: baseline + htp-sim dump + compare in one command, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx

from qnn_debug.diagnose import diagnose
from qnn_debug.examples import small_cnn
from qnn_debug.inject import inject

QNN_DEBUG = [sys.executable, "-m", "qnn_debug"]


def test_diagnose_cli_prints_one_json_document_and_writes_the_report(tmp_path: Path):
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model))
    out = tmp_path / "diag"
    proc = subprocess.run([*QNN_DEBUG, "diagnose", str(model), "--target", "htp-sim", "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)  # MNN and the QNN EP print to fd 1 in their workers, never here
    assert doc["compare"]["verdict"]["kind"] in ("ok", "precision") and doc["compare"]["first_failing"] is None
    assert doc["baseline_trusted"] is True  # the MNN CPU gate ran and agreed
    for name in ("compare.md", "compare.json", "error_by_position.png"):
        assert (out / "report" / name).stat().st_size > 0
    assert set(doc["timings"]) >= {"baseline_s", "dump_s", "compare_s", "total_s"}

    again = subprocess.run([*QNN_DEBUG, "diagnose", str(model), "--out", str(out), "--json"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and json.loads(again.stdout)["error"] == "bad_input"  # never clobbers without --force


def test_diagnose_an_injected_bug_against_the_original_model(tmp_path: Path):
    original = tmp_path / "cnn.onnx"
    edited = tmp_path / "cnn_bug.onnx"
    onnx.save(small_cnn(), str(original))
    onnx.save(inject(small_cnn(), "conv_on_zeros", "conv2"), str(edited))
    result = diagnose(edited, tmp_path / "diag", reference_model=original, mnn_gate=False)
    ff = result.compare.first_failing
    assert result.compare.verdict.kind == "real_bug" and result.compare.verdict.pattern == "zero_input"
    assert ff is not None and ff.op == "conv2" and ff.op_type == "Conv"
    md = (Path(result.report_dir) / "compare.md").read_text()
    assert "REAL BUG at `conv2`" in md


def test_diagnose_bad_model_path_is_exit_2(tmp_path: Path):
    proc = subprocess.run([*QNN_DEBUG, "diagnose", str(tmp_path / "missing.onnx"), "--out", str(tmp_path / "d"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "does not exist" in json.loads(proc.stdout)["message"]
    assert "Traceback" not in proc.stderr


def test_demo_shows_a_healthy_and_an_injected_bug_diagnosis(tmp_path: Path):
    from qnn_debug.demo import run_demo

    steps = {s.name: s for s in run_demo(tmp_path / "demo").steps}
    healthy, bug = steps["diagnose healthy run"], steps["diagnose injected bug"]
    assert healthy.details["verdict"]["kind"] in ("ok", "precision") and healthy.details["first_failing"] is None
    assert bug.details["right_answer"] is True and bug.details["first_failing"]["op"] == bug.details["injected"]["node"]
    assert Path(bug.path or "").name == "compare.md" and "right answer" in bug.summary
