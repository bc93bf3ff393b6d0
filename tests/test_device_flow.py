"""The device target end to end on the recording fake adb: probe → push → run → pull → import → compare.

ModuleBasic and MNN2QNNModel on the fake phone are named test doubles that run real MNN (pip) on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from doubles.fake_phone import MNN_DIR, FakePhone, python_wrapper
from qnn_debug.baseline import run_baseline
from qnn_debug.runstore import load_run

CLI = str(Path(sys.executable).parent / "qnn-debug")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def baseline(mnn_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baseline of the fixture ONNX model on the fixture input (ORT fp32 reference + fp16 floor)."""
    d = tmp_path_factory.mktemp("base")
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    np.savez(d / "in.npz", x=x)
    run_baseline(mnn_fixtures / "testdir" / "test.onnx", d / "b", inputs=d / "in.npz", mnn_gate=False)
    return d / "b"


@pytest.fixture()
def tools(tmp_path: Path) -> tuple[Path, Path]:
    exe = python_wrapper(tmp_path / "tools" / "MNN2QNNModel", "fake_mnn2qnn.py")
    sdk = tmp_path / "sdk"
    (sdk / "bin" / "x86_64-linux-clang").mkdir(parents=True)
    return exe, sdk


def test_offline_dump_end_to_end_and_compare(mnn_fixtures: Path, baseline: Path, tools: tuple[Path, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    exe, sdk = tools
    out = tmp_path / "run"
    res = cli("dump", str(mnn_fixtures / "test.mnn"), "--target", "device", "--inputs", str(baseline / "inputs.npz"),
              "--option", f"mnn2qnn={exe}", "--option", f"qnn_sdk={sdk}", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert (summary["target"], summary["soc_model"], summary["htp_arch"], summary["precision"]) == ("device", 57, 75, "fp16")
    run = load_run(out)
    assert {"x", "x@cast", "x___tr4c1", "r1", "c2", "y__before_tr", "y@cast", "y"} == set(run.names())
    assert run.record.extra["mode"] == "offline" and run.record.extra["serial"] == "FAKE0001"
    assert (out / "logs" / "modulebasic.log").read_text().count("Run for") == 2
    conv = run.record.extra["mnn2qnn"]
    assert (conv["mnn"], conv["bin"]) == ("mnn2qnn/test_57_75.mnn", "mnn2qnn/test_57_75.bin")
    assert (out / conv["mnn"]).is_file() and (out / conv["bin"]).is_file()
    ref = load_run(baseline / "reference")
    for name in ("r1", "c2", "y"):
        rel = np.abs(run.array(name) - ref.array(name)).max() / np.abs(ref.array(name)).max()
        assert rel < 2e-3, (name, rel)

    from qnn_debug.compare.pipeline import compare_paths

    result = compare_paths(baseline, out)
    assert result.verdict.kind == "ok" and result.counts["aligned"] >= 4

    calls = phone.calls()
    verbs = [c[2] if c[:1] == ["-s"] else c[0] for c in calls]
    assert verbs[0] == "devices" and "push" in verbs and "pull" in verbs and verbs[-1] == "shell"
    assert all(c[:2] == ["-s", "FAKE0001"] for c in calls if c[0] != "devices")
    pushed = [Path(c[3]).name for c in calls if c[2:3] == ["push"]]
    assert pushed[:2] == ["test_57_75.mnn", "test_57_75.bin"]
    run_dirs = {c[4].split("/")[5] for c in calls if c[2:3] == ["push"]}
    assert len(run_dirs) == 1, "one fresh device dir per run"
    assert "rm -rf -- /data/local/tmp/qnn-debug/runs/" in calls[-1][3]
    assert not any(phone.device("/data/local/tmp/qnn-debug/runs").iterdir())
    assert not (tmp_path / "qnn_intermediate_outputs").exists()


def test_online_run_with_baseline_references(mnn_fixtures: Path, baseline: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    res = cli("run", str(mnn_fixtures / "test.mnn"), "--target", "device", "--baseline", str(baseline), "--serial", "FAKE0001",
              "--option", "keep=true", "--out", str(tmp_path / "run"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["status"], out["mode"], out["forward_type"]) == ("passed", "online", 5)
    judged = out["report"]["judged"][0]
    assert judged["source"] == "output file" and judged["rel_error"] < 1e-3
    assert judged["max_abs_reference"] == pytest.approx(10.468, abs=1e-3)
    kept = next(phone.device("/data/local/tmp/qnn-debug/runs").iterdir())
    assert json.loads((kept / "testdir" / "input.json").read_text())["shapeMutable"] is False
    assert (kept / "testdir" / "y.txt").is_file() and (kept / "work" / "output" / "0_0.txt").is_file()
    run = load_run(tmp_path / "run")
    assert run.names() == ["x", "y"] and run.array("y").shape == (1, 16, 1, 1)
    assert any("only the final outputs" in w for w in run.record.warnings)


@pytest.mark.parametrize("mode,code,needle", [("crash", 3, "exited with status"), ("qnn6000", 1, "6000")])
def test_failures_are_reported_not_hidden(mnn_fixtures: Path, baseline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          mode: str, code: int, needle: str) -> None:
    FakePhone.install(tmp_path, monkeypatch)
    env = {**os.environ, "FAKE_MB_MODE": mode}
    res = cli("run", str(mnn_fixtures / "test.mnn"), "--target", "device", "--baseline", str(baseline),
              "--out", str(tmp_path / "run"), "--json", env=env)
    assert res.returncode == code, res.stderr
    doc = json.loads(res.stdout)
    assert needle in (doc.get("message") or doc.get("reason") or "")
    assert "Traceback" not in res.stderr
    if mode == "qnn6000":
        assert doc["status"] == "failed" and doc["report"]["graph_execute_failed"] == 2


def test_missing_libraries_stop_the_run_with_push_commands(mnn_fixtures: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch, libs=False)
    phone.install_runtime(arch=75, skip=("libQnnHtpV75Skel.so",))
    res = cli("run", str(mnn_fixtures / "test.mnn"), "--target", "device", "--testdir", str(mnn_fixtures / "testdir"),
              "--out", str(tmp_path / "run"), "--json")
    assert res.returncode == 3
    err = json.loads(res.stdout)
    assert err["error"] == "device_failure" and "libQnnHtpV75Skel.so" in err["message"]
    assert f'push "${{QNN_SDK_ROOT:?set QNN_SDK_ROOT first}}"/lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so {MNN_DIR}/' in err["hint"]
    assert not any(c[2:3] == ["push"] for c in phone.calls())


def test_bad_input_before_touching_the_phone(mnn_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    res = cli("dump", str(mnn_fixtures / "testdir" / "test.onnx"), "--target", "device", "--out", str(tmp_path / "r"), "--json")
    assert res.returncode == 2 and "not an .mnn model" in json.loads(res.stdout)["message"]
    res2 = cli("dump", str(mnn_fixtures / "test.mnn"), "--target", "device", "--option", "colour=blue",
               "--out", str(tmp_path / "r"), "--json")
    assert res2.returncode == 2 and "colour" in json.loads(res2.stdout)["message"]
    assert phone.calls() == []


HOSTILE_IN = "in put;$(touch pwned_in)"
HOSTILE_MID = "mid'`touch pwned_mid`"
HOSTILE_OUT = 'out"\\n$(touch pwned_out)'


def test_hostile_tensor_and_model_names_end_to_end(tools: tuple[Path, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", [HOSTILE_IN, "w"], [HOSTILE_MID], name="conv;rm -rf /", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", [HOSTILE_MID], [HOSTILE_OUT], name="relu $(x)")],
        "g", [helper.make_tensor_value_info(HOSTILE_IN, TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(HOSTILE_OUT, TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "h.onnx")
    run_baseline(tmp_path / "h.onnx", tmp_path / "base")
    mnn = tmp_path / "my model;$(touch pwned_model) 'x'.mnn"
    mnn.write_bytes((tmp_path / "base" / "mnn_cpu" / "model.mnn").read_bytes())
    phone = FakePhone.install(tmp_path, monkeypatch)
    exe, sdk = tools
    res = cli("dump", str(mnn), "--target", "device", "--inputs", str(tmp_path / "base" / "inputs.npz"),
              "--option", f"mnn2qnn={exe}", "--option", f"qnn_sdk={sdk}", "--out", str(tmp_path / "run"), "--json")
    assert res.returncode == 0, res.stderr
    run = load_run(tmp_path / "run")
    assert HOSTILE_IN in run.names() and HOSTILE_OUT in run.names()
    assert run.record.extra["mnn2qnn"]["renamed_from"] == mnn.name
    ref = load_run(tmp_path / "base" / "reference")
    np.testing.assert_allclose(run.array(HOSTILE_OUT), ref.array(HOSTILE_OUT), atol=2e-2)
    online = cli("run", str(mnn), "--target", "device", "--baseline", str(tmp_path / "base"), "--out", str(tmp_path / "run2"),
                 "--json")
    assert online.returncode == 0, online.stderr
    assert json.loads(online.stdout)["status"] == "passed"
    created = {"pwned_in", "pwned_mid", "pwned_out", "pwned_model"}  # what a broken quote would have run `touch` on
    assert not [p for p in [*tmp_path.rglob("*"), *Path.cwd().glob("pwned*")] if p.name in created]
    assert not [p for p in phone.root.rglob("*") if p.name in created]
