"""`baseline MODEL.onnx --mnn-model user.mnn`: the user's own .mnn is gated and compared with the one converted here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.examples import small_cnn


def test_own_mnn_same_then_different(tmp_path: Path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(small_cnn(seed=0), str(a))
    onnx.save(small_cnn(seed=1), str(b))  # same graph, other weights: what a stale or re-trained .mnn looks like
    first = run_baseline(a, tmp_path / "base_a")
    same_mnn = tmp_path / "user_same.mnn"
    shutil.copy(Path(first.out) / "mnn_cpu" / "model.mnn", same_mnn)
    other = run_baseline(b, tmp_path / "base_b", mnn_gate=True)
    other_mnn = tmp_path / "user_other.mnn"
    shutil.copy(Path(other.out) / "mnn_cpu" / "model.mnn", other_mnn)

    same = run_baseline(a, tmp_path / "same", mnn_model=same_mnn).report
    assert same.mnn_model is not None and same.mnn_model.gate.status == "passed"
    assert same.mnn_model.same_as_converted is True and "same model" in same.sentence

    runner = CliRunner()
    out = runner.invoke(app, ["baseline", str(a), "--out", str(tmp_path / "diff"), "--mnn-model", str(other_mnn), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout.strip().splitlines()[-1])["report"]
    check = doc["mnn_model"]
    assert check["gate"]["status"] == "failed" and check["same_as_converted"] is False
    assert any("different numbers" in d for d in check["differences"])
    assert "disagrees with ONNX Runtime" in doc["sentence"] and "differs from the .mnn converted here" in doc["sentence"]
    assert doc["trusted"] is True  # the reference itself is still checked by the converted model's gate


def test_bad_mnn_model_arguments(tmp_path: Path) -> None:
    a = tmp_path / "a.onnx"
    onnx.save(small_cnn(), str(a))
    with pytest.raises(BadInputError, match=r"not an \.mnn"):
        run_baseline(a, tmp_path / "x", mnn_model=a)
    with pytest.raises(BadInputError, match="does not exist"):
        run_baseline(a, tmp_path / "y", mnn_model=tmp_path / "missing.mnn")
