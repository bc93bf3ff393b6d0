"""MNN test dirs: the testMNNFromOnnx layout, building from a baseline, and toggling shapeMutable safely."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.mnn.testdir import (
    load_inputs,
    load_references,
    read_testdir,
    toggle_shape_mutable,
    toggle_shapeMutable,
)
from qnn_debug.mnn.testdir_builder import write_testdir

runner = CliRunner()


def test_reads_the_fixture_test_dir(mnn_fixtures: Path) -> None:
    info = read_testdir(mnn_fixtures / "testdir")
    assert info.inputs == {"x": [1, 3, 32, 32]} and info.outputs == ["y"] and info.references == ["y"]
    assert info.shape_mutable is None
    x = load_inputs(mnn_fixtures / "testdir")["x"]
    assert x.shape == (1, 3, 32, 32) and x.dtype == np.float32
    assert load_references(mnn_fixtures / "testdir")["y"].shape == (16,)


def test_written_layout_matches_testMNNFromOnnx(mnn_fixtures: Path, tmp_path: Path) -> None:
    x = load_inputs(mnn_fixtures / "testdir")["x"]
    y = load_references(mnn_fixtures / "testdir")["y"].reshape(1, 16, 1, 1)
    info = write_testdir(tmp_path / "t", {"x": x}, ["y"], references={"y": y})
    doc = json.loads((tmp_path / "t" / "input.json").read_text())
    assert doc == json.loads((mnn_fixtures / "testdir" / "input.json").read_text())
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "t" / "x.txt", dtype=np.float32), x.ravel())
    np.testing.assert_allclose(np.loadtxt(tmp_path / "t" / "y.txt"), y.ravel(), rtol=1e-7)
    assert info.references == ["y"]
    with pytest.raises(BadInputError, match="not empty"):
        write_testdir(tmp_path / "t", {"x": x}, ["y"])


def test_names_with_slash_nest_and_escapes_are_refused(tmp_path: Path) -> None:
    a = np.ones((1, 2), np.float32)
    info = write_testdir(tmp_path / "t", {"input/ids": a, "q'uote $(x)": a}, ["out"], shape_mutable=False)
    assert (tmp_path / "t" / "input" / "ids.txt").is_file() and (tmp_path / "t" / "q'uote $(x).txt").is_file()
    assert info.shape_mutable is False
    for bad in ("../evil", "/abs", "a/../../b"):
        with pytest.raises(BadInputError):
            write_testdir(tmp_path / f"u{len(bad)}", {bad: a}, [])
    assert not (tmp_path / "evil.txt").exists()


def test_from_baseline(mnn_fixtures: Path, tmp_path: Path) -> None:
    from qnn_debug.baseline import run_baseline

    x = load_inputs(mnn_fixtures / "testdir")["x"]
    np.savez(tmp_path / "in.npz", x=x)
    run_baseline(mnn_fixtures / "testdir" / "test.onnx", tmp_path / "base", inputs=tmp_path / "in.npz", mnn_gate=False)
    res = runner.invoke(app, ["testdir", str(tmp_path / "td"), "--baseline", str(tmp_path / "base"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["shape_mutable"] is False and out["references"] == ["y"]
    np.testing.assert_allclose(load_references(tmp_path / "td")["y"], load_references(mnn_fixtures / "testdir")["y"],
                               rtol=1e-6, atol=1e-6)


def test_toggle_flip_set_idempotent_with_backups(mnn_fixtures: Path, tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    original = (mnn_fixtures / "testdir" / "input.json").read_text()
    (d / "input.json").write_text(original)
    r1 = toggle_shape_mutable(d)  # absent = ModuleBasic's default true → flipped to false
    assert (r1.old, r1.new, r1.changed) == (None, False, True)
    assert Path(r1.backup or "").read_text() == original
    doc = json.loads((d / "input.json").read_text())
    assert doc["shapeMutable"] is False and doc["inputs"] == json.loads(original)["inputs"]
    r2 = toggle_shapeMutable(d, False)
    assert (r2.old, r2.new, r2.changed, r2.backup) == (False, False, False, None)
    r3 = toggle_shape_mutable(d)
    assert (r3.old, r3.new, r3.changed) == (False, True, True) and r3.backup != r1.backup
    assert json.loads(Path(r3.backup or "").read_text())["shapeMutable"] is False
    assert sorted(p.name for p in d.iterdir()) == ["input.json", "input.json.bak", "input.json.bak2"]


def test_toggle_cli(mnn_fixtures: Path, tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "input.json").write_text((mnn_fixtures / "testdir" / "input_mut_true.json").read_text())
    res = runner.invoke(app, ["toggle-shape-mutable", str(d), "--value", "false", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["old"] is True and json.loads(res.stdout)["new"] is False
    bad = runner.invoke(app, ["toggle-shape-mutable", str(d), "--value", "maybe", "--json"])
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"] == "bad_input"


@pytest.mark.parametrize("content", [None, "not json", '{"outputs": ["y"]}', '{"inputs": [], "outputs": []}', "[1, 2]"])
def test_toggle_refuses_non_test_dirs(tmp_path: Path, content: str | None) -> None:
    d = tmp_path / "t"
    d.mkdir()
    if content is not None:
        (d / "input.json").write_text(content)
    with pytest.raises(BadInputError):
        toggle_shape_mutable(d, True)
    assert sorted(p.name for p in d.iterdir()) == ([] if content is None else ["input.json"])


def test_toggle_refuses_to_flip_a_non_bool(tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "input.json").write_text('{"inputs": [{"name": "x"}], "shapeMutable": "false"}')
    with pytest.raises(BadInputError, match="not a JSON true/false"):
        toggle_shape_mutable(d)
    assert toggle_shape_mutable(d, False).new is False
