"""The host target: a local MNN build dir (here holding the ModuleBasic test double) with QNN libs on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from doubles.fake_phone import python_wrapper
from qnn_debug.cli import app
from qnn_debug.runstore import load_run

CLI = str(Path(sys.executable).parent / "qnn-debug")
runner = CliRunner()


@pytest.fixture()
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    build_dir = tmp_path / "mnn-build"
    python_wrapper(build_dir / "ModuleBasic.out", "fake_module_basic.py")
    (build_dir / "libMNN.so").write_bytes(b"placeholder")
    libs = tmp_path / "qnn-libs"
    libs.mkdir()
    (libs / "libQnnHtp.so").write_bytes(b"placeholder")
    env_log = tmp_path / "mb-env.json"
    monkeypatch.setenv("FAKE_MB_ENV_LOG", str(env_log))
    return build_dir, libs, env_log


def test_host_online_run(mnn_fixtures: Path, build: tuple[Path, Path, Path], tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    build_dir, libs, env_log = build
    monkeypatch.chdir(tmp_path)
    res = subprocess.run([CLI, "run", str(mnn_fixtures / "test.mnn"), "--target", "host", "--testdir", str(mnn_fixtures / "testdir"),
                          "--option", f"mnn_build_dir={build_dir}", "--option", f"qnn_lib_dir={libs}", "--precision", "high",
                          "--out", str(tmp_path / "run"), "--json"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "passed" and out["report"]["precision"] == 1
    started = json.loads(env_log.read_text())
    assert started["LD_LIBRARY_PATH"].split(os.pathsep)[:2] == [str(libs), str(build_dir)]
    assert started["cwd"].endswith("/work") and not started["cwd"].startswith(str(tmp_path))
    assert started["MNN_QNN_DUMP_DIR"].endswith("/dump") and started["argv"][4] == "5"
    assert not (tmp_path / "output").exists(), "ModuleBasic's output/ must never land in the user's directory"
    assert not Path(started["cwd"]).exists(), "the fresh run dir is removed afterwards"
    y = load_run(tmp_path / "run").array("y").ravel()
    np.testing.assert_allclose(y, np.loadtxt(mnn_fixtures / "testdir" / "y.txt"), atol=1e-4)


def test_host_offline_dump_matches_the_real_fixture_dump(mnn_fixtures: Path, build: tuple[Path, Path, Path],
                                                          tmp_path: Path) -> None:
    """The double's dump and MNN's real simulator dump import to the same names, layouts and (fp16) values."""
    build_dir, _, _ = build
    exe = python_wrapper(tmp_path / "tools" / "MNN2QNNModel", "fake_mnn2qnn.py")
    sdk = tmp_path / "sdk"
    (sdk / "bin" / "x86_64-linux-clang").mkdir(parents=True)
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    np.savez(tmp_path / "in.npz", x=x)
    res = runner.invoke(app, ["dump", str(mnn_fixtures / "test.mnn"), "--target", "host", "--soc", "69",
                              "--inputs", str(tmp_path / "in.npz"), "--option", f"mnn_build_dir={build_dir}",
                              "--option", f"mnn2qnn={exe}", "--option", f"qnn_sdk={sdk}", "--out", str(tmp_path / "run"),
                              "--json"])
    assert res.exit_code == 0, res.output
    ours = load_run(tmp_path / "run")
    real = runner.invoke(app, ["import-dump", str(mnn_fixtures / "dumps" / "offline_fp16"), "--model",
                               str(mnn_fixtures / "test.mnn"), "--out", str(tmp_path / "real"), "--json"])
    assert real.exit_code == 0, real.output
    theirs = load_run(tmp_path / "real")
    assert (ours.record.soc_model, ours.record.htp_arch) == (69, 79)
    shared = set(theirs.names()) - {"c1@ReluTensor"}  # the double does not model conv-internal stages
    assert shared <= set(ours.names())
    for name in shared:
        a, b = ours.array(name), theirs.array(name)
        assert a.shape == b.shape and ours.info(name).source_dtype == theirs.info(name).source_dtype, name
        assert np.abs(a - b).max() <= 2e-3 * max(1.0, float(np.abs(b).max())), name


def test_host_needs_a_build_dir(mnn_fixtures: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", str(mnn_fixtures / "test.mnn"), "--target", "host", "--out", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 2 and "mnn_build_dir" in json.loads(res.stdout)["hint"]
    res2 = runner.invoke(app, ["run", str(mnn_fixtures / "test.mnn"), "--target", "host", "--option",
                               f"mnn_build_dir={tmp_path}", "--out", str(tmp_path / "r"), "--json"])
    assert res2.exit_code == 2 and "no ModuleBasic.out" in json.loads(res2.stdout)["message"]


def test_import_dump_cli(mnn_fixtures: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["import-dump", str(mnn_fixtures / "dumps" / "online_fp16"), "--model",
                              str(mnn_fixtures / "test.mnn"), "--out", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["execution"], doc["tensors"], doc["precision"], doc["outputs"]) == (0, 8, "fp16", ["y"])
    again = runner.invoke(app, ["import-dump", str(mnn_fixtures / "dumps" / "online_fp16"), "--out", str(tmp_path / "r"), "--json"])
    assert again.exit_code == 2 and json.loads(again.stdout)["error"] == "bad_input"
    missing = runner.invoke(app, ["import-dump", str(tmp_path / "nope"), "--out", str(tmp_path / "r2"), "--json"])
    assert missing.exit_code == 2 and "does not exist" in json.loads(missing.stdout)["message"]


@pytest.mark.parametrize("plant", ["link out", "fifo"])
def test_host_copies_of_the_test_dir_stay_confined(mnn_fixtures: Path, build: tuple[Path, Path, Path], tmp_path: Path,
                                                   plant: str) -> None:
    """The host target copies the test dir through the engine's file opener: a link leading out of --root or a
    FIFO in it is a typed error (exit 2, one JSON document), never copied or waited on."""
    import shutil

    import hostile

    build_dir, libs, _ = build
    root, outside = tmp_path, tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    shutil.copy(mnn_fixtures / "test.mnn", root / "test.mnn")
    shutil.copytree(mnn_fixtures / "testdir", root / "testdir")
    if plant == "fifo":
        hostile.fifo(root / "testdir" / "extra.txt")
    else:
        (root / "testdir" / "extra.txt").symlink_to(outside / "secret.txt")
    before = hostile.snapshot(outside)
    res = subprocess.run([CLI, "run", str(root / "test.mnn"), "--target", "host", "--testdir", str(root / "testdir"),
                          "--option", f"mnn_build_dir={build_dir}", "--option", f"qnn_lib_dir={libs}",
                          "--out", str(root / "run"), "--root", str(root), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, (res.stdout, res.stderr[-800:])
    doc = json.loads(res.stdout)
    assert doc["hint"] and ("outside the allowed roots" if plant == "link out" else "not a regular file") in doc["message"]
    assert "SECRET" not in res.stdout + res.stderr
    assert hostile.snapshot(outside) == before


def test_host_probes_take_the_qnn_sdk_too(build: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """`bisect --target host` runs ModuleBasic once per cut: `--option qnn_sdk` reaches it (QNN_SDK_ROOT and the
    SDK's libraries), as for every MNN tool the product starts; before, the probe options refused the key."""
    import onnx

    from qnn_debug.examples import small_cnn

    build_dir, libs, env_log = build
    sdk = tmp_path / "sdk"
    (sdk / "lib" / "x86_64-linux-clang").mkdir(parents=True)
    onnx.save(small_cnn(), str(tmp_path / "m.onnx"))
    res = runner.invoke(app, ["bisect", str(tmp_path / "m.onnx"), "--target", "host", "--option",
                              f"mnn_build_dir={build_dir}", "--option", f"qnn_lib_dir={libs}", "--option",
                              f"qnn_sdk={sdk}", "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["verdict"] == "ok"
    seen = json.loads(env_log.read_text())
    assert seen["QNN_SDK_ROOT"] == str(sdk.absolute())
    assert str(sdk.absolute() / "lib" / "x86_64-linux-clang") in seen["LD_LIBRARY_PATH"].split(os.pathsep)
