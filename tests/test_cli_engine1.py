"""The baseline, dump and demo commands as a user and the MCP server see them: one JSON document on stdout,
progress on stderr, exit codes 2/3 without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from qnn_debug.baseline import BaselineResult
from qnn_debug.cli import app
from qnn_debug.demo import DemoResult
from qnn_debug.dump import DumpResult
from qnn_debug.examples import single_op_model, small_cnn
from qnn_debug.progress import PROGRESS_PREFIX

CLI = Path(sys.executable).parent / "qnn-debug"
runner = CliRunner()


def qnn_debug(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)


def one_json(stdout: str) -> dict[str, Any]:
    """stdout must be exactly one JSON document (nothing MNN or QNN printed may leak into it)."""
    doc = json.loads(stdout)
    assert stdout.strip().count("\n") == 0
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "small.onnx"
    onnx.save(small_cnn(), str(path))
    return path


@pytest.fixture(scope="module")
def baseline_dir(model: Path) -> Path:
    out = model.parent / "base"
    proc = qnn_debug("baseline", model, "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    result = BaselineResult.model_validate(one_json(proc.stdout))
    assert result.report.trusted and result.out == str(out.resolve())
    assert "mnn-cpu: run" in proc.stderr  # progress went to stderr
    return out


def test_dump_json_and_progress_json(model: Path, baseline_dir: Path, tmp_path: Path) -> None:
    proc = qnn_debug("dump", model, "--target", "htp-sim", "--soc", "69", "--arch", "79", "--inputs",
                     baseline_dir / "inputs.npz", "--out", tmp_path / "htp", "--json", "--progress-json")
    assert proc.returncode == 0, proc.stderr
    result = DumpResult.model_validate(one_json(proc.stdout))
    assert (result.target, result.precision, result.soc_model, result.htp_arch) == ("htp-sim", "fp16", 69, 79)
    assert result.tensors == 5 and result.qnn_nodes and result.observer_effect_db is not None
    events = [json.loads(line[len(PROGRESS_PREFIX):]) for line in proc.stderr.splitlines() if line.startswith(PROGRESS_PREFIX)]
    stages = {e["stage"] for e in events if e["finished"]}
    assert {"htp-sim: marked session", "htp-sim: marked run", "htp-sim: save"} <= stages


def test_dump_human_output(model: Path, baseline_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["dump", str(model), "--inputs", str(baseline_dir / "inputs.npz"),
                                 "--out", str(tmp_path / "h")])
    assert result.exit_code == 0, result.output
    assert "htp-sim fp16 run" in result.output and "none on CPU" in result.output and "observer effect" in result.output


def test_unsupported_op_exits_3_without_traceback(tmp_path: Path) -> None:
    onnx.save(single_op_model("Acos", [1, 8], name="acos"), str(tmp_path / "acos.onnx"))
    proc = qnn_debug("dump", tmp_path / "acos.onnx", "--out", tmp_path / "o", "--json")
    assert proc.returncode == 3
    err = one_json(proc.stdout)
    assert err["error"] == "unsupported_nodes" and "acos (Acos)" in err["message"] and err["hint"]
    assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error: ")


def _invoke_json(args: list[str]) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_bad_input_exits_2_with_json_error(model: Path, tmp_path: Path) -> None:
    corrupt = tmp_path / "bad.npz"
    corrupt.write_bytes(b"garbage")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, y=np.zeros((1, 3, 32, 32), np.float32))
    cases = [
        (["baseline", str(tmp_path / "missing.onnx"), "--out", str(tmp_path / "a")], "does not exist"),
        (["baseline", str(model), "--out", str(tmp_path / "b"), "--shape", "x=1x3"], "rank 2"),
        (["baseline", str(model), "--out", str(tmp_path / "c"), "--inputs", str(corrupt)], "not a readable .npz"),
        (["baseline", str(model), "--out", str(tmp_path / "d"), "--inputs", str(wrong)], "missing x"),
        (["dump", str(model), "--out", str(tmp_path / "e"), "--precision", "int4"], "unknown --precision"),
        (["dump", str(model), "--out", str(tmp_path / "f"), "--option", "novalue"], "cannot read --option"),
        (["dump", str(model), "--out", str(tmp_path / "g"), "--target", "nowhere"], "unknown target"),
        (["dump", str(model), "--out", str(tmp_path / "h"), "--shape", "x=1x3x32"], "rank 3"),
    ]
    for args, match in cases:
        code, doc = _invoke_json(args)
        assert code == 2, (args, doc)
        assert doc["error"] == "bad_input" and match in doc["message"] and doc["hint"], (args, doc)


def test_baseline_human_output_and_force(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    first = runner.invoke(app, ["baseline", str(model), "--out", str(out), "--no-mnn-gate"])
    assert first.exit_code == 0 and "Not verified" in first.output and "MNN CPU gate: skipped" in first.output
    again = runner.invoke(app, ["baseline", str(model), "--out", str(out), "--no-mnn-gate"])
    assert again.exit_code == 2 and "--force" in again.output
    forced = runner.invoke(app, ["baseline", str(model), "--out", str(out), "--force", "--seed", "3"])
    assert forced.exit_code == 0 and "Trusted" in forced.output and "random:seed=3" in forced.output


def test_default_out_is_under_qnn_debug_runs(model: Path, tmp_path: Path) -> None:
    proc = qnn_debug("baseline", model, "--no-mnn-gate", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert one_json(proc.stdout)["out"] == str((tmp_path / "qnn-debug-runs" / "small" / "baseline").resolve())


def test_demo_runs_twice_and_protects_other_dirs(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = qnn_debug("demo", "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    result = DemoResult.model_validate(one_json(proc.stdout))
    # the engine's steps come first; later steps (diagnosis) are appended by their own modules
    assert result.finished and [s.name for s in result.steps][:3] == ["build model", "baseline", "htp-sim dump"]
    assert result.steps[1].details["trusted"] is True
    assert result.steps[2].details["tensors"] == 36 and "none on CPU" in result.steps[2].summary
    human = qnn_debug("demo", "--out", out)  # a second demo replaces the first
    assert human.returncode == 0 and "1. build model" in human.stdout and "3. htp-sim dump" in human.stdout
    assert json.loads((out / "demo.json").read_text())["finished"] is True
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    code, doc = _invoke_json(["demo", "--out", str(foreign)])
    assert code == 2 and doc["error"] == "bad_input" and (foreign / "keep.txt").exists()


def test_help_lists_the_engine_commands() -> None:
    proc = qnn_debug("--help")
    assert proc.returncode == 0
    for command in ("baseline", "dump", "demo"):
        assert command in proc.stdout
