"""A localise-blocks run that stopped before its result can be run again into the same --out without --force (an
assistant was told "output directory is not empty" after fixing the input of a failed run); anything else in --out
is still refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from typer.testing import CliRunner

from numerics_models import decoder_llm, token_ids
from qnn_debug.cli import app


def test_a_stopped_attempt_is_replaced_and_foreign_files_are_not(tmp_path: Path) -> None:
    # no /layers.N/ names: its layers come from the structure; the inputs' wrong name stops the run late
    onnx.save(decoder_llm(hidden=64, layers=2, tokens=16, big_value=20.0), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", not_ids=token_ids(16, 96))
    argv = ["localise-blocks", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz")]
    first = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "out")])
    assert first.exit_code == 2 and "not_ids" in first.output
    assert (tmp_path / "out" / "blocks").is_dir()  # the stopped attempt's folder
    again = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "out")])
    assert again.exit_code == 2 and "not_ids" in again.output and "not empty" not in again.output
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    foreign = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "mine")])
    assert foreign.exit_code == 2 and "not empty" in foreign.output
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
