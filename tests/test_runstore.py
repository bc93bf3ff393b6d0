"""run.json and tensor files round-trip through the public loading API; bad run dirs give clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.runstore import ModelInfo, RunRecord, RunWriter, load_run


def _record() -> RunRecord:
    return RunRecord(role="target", target="htp-sim", precision="fp16", soc_model=69, htp_arch=79,
                     model=ModelInfo(path="m.onnx", sha256="0" * 64, format="onnx"))


def test_round_trip_float_and_quantized(tmp_path):
    w = RunWriter(tmp_path / "run", _record())
    a = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    q = np.array([0, 1, 255], dtype=np.uint8)
    w.add_tensor("x", a, kind="input")
    w.add_tensor("conv/out:0", (q.astype(np.float32) - 3) * 0.5, op="conv", op_type="Conv", position=0,
                 raw=q, scale=0.5, offset=-3)
    w.finish()
    run = load_run(tmp_path / "run")
    assert run.record.soc_model == 69 and run.record.finished_at
    np.testing.assert_array_equal(run.array("x"), a)
    assert isinstance(run.array("x"), np.memmap)
    info = run.info("conv/out:0")
    assert info.quant is not None and info.quant.zero_point == 3 and info.source_dtype == "uint8"
    np.testing.assert_array_equal(run.raw("conv/out:0"), q)
    assert "/" not in info.file.split("/", 1)[1]  # the tensor name was sanitised for the file name
    assert [t.name for t in run.iter_in_order()] == ["x", "conv/out:0"]


def test_incomplete_and_foreign_dirs(tmp_path):
    w = RunWriter(tmp_path / "run", _record())
    w.add_tensor("x", np.zeros(3, np.float32))
    with pytest.raises(BadInputError, match="did not finish"):
        load_run(tmp_path / "run")
    (tmp_path / "other").mkdir()
    with pytest.raises(BadInputError, match="not a qnn-debug run"):
        load_run(tmp_path / "other")
    with pytest.raises(BadInputError, match="does not exist"):
        load_run(tmp_path / "missing")


def test_refuses_to_clobber(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(BadInputError, match="not empty"):
        RunWriter(tmp_path / "mine", _record())
    with pytest.raises(BadInputError, match="does not look like"):
        RunWriter(tmp_path / "mine", _record(), force=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    RunWriter(tmp_path / "r", _record()).finish()
    RunWriter(tmp_path / "r", _record(), force=True).finish()  # a previous run may be replaced


def test_corrupt_run_json(tmp_path):
    RunWriter(tmp_path / "r", _record()).finish()
    (tmp_path / "r" / "run.json").write_text("{not json")
    with pytest.raises(BadInputError, match="unreadable"):
        load_run(tmp_path / "r")
    (tmp_path / "r" / "run.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(BadInputError, match="schema_version"):
        load_run(tmp_path / "r")


def test_tensor_file_outside_run_is_refused(tmp_path):
    w = RunWriter(tmp_path / "r", _record())
    w.add_tensor("x", np.zeros(2, np.float32))
    w.finish()
    data = json.loads((tmp_path / "r" / "run.json").read_text())
    data["tensors"][0]["file"] = "../../etc/passwd"
    (tmp_path / "r" / "run.json").write_text(json.dumps(data))
    with pytest.raises(BadInputError, match="outside"):
        load_run(tmp_path / "r").array("x")
