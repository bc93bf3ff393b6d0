"""No floor and no re-run: a tensor off the fixed fp16 level is ``undecided`` with what is missing, never
``precision`` (an MNN-only baseline of a real fused-ReLU bug was called precision at 0.55).

Targets are ``.npz`` files of the model with a mild wrong scale injected (SQNR ~30 dB: too good for the
"broken outright" rule, far beyond what fp16 gives), compared through the CLI against a lone reference run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.examples import deep_conv_net, small_cnn
from qnn_debug.inject import inject
from qnn_debug.onnx_graph import mark_all
from qnn_debug.runstore import load_run

runner = CliRunner()
CASES = {"small_cnn": (small_cnn, "relu1"), "deep_conv_net": (deep_conv_net, None)}


def _cpu(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(mark_all(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _compare(*args: str) -> dict:
    res = runner.invoke(app, ["compare", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_floor_and_no_rerun_is_undecided_not_precision(case: str, tmp_path: Path) -> None:
    build, node = CASES[case]
    model = build()
    if node is None:  # the middle Relu of the deeper net
        relus = [n.name for n in model.graph.node if n.op_type == "Relu"]
        node = relus[len(relus) // 2]
    onnx.save(model, str(tmp_path / "m.onnx"))
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", mnn_gate=False)
    ref = load_run(tmp_path / "base" / "reference")
    feeds = {n: np.array(ref.array(n)) for n in ref.record.inputs.names}
    np.savez(tmp_path / "t.npz", **_cpu(inject(model, "scale_output", node, factor=0.97), feeds))
    shutil.copytree(tmp_path / "base" / "reference", tmp_path / "lone" / "reference")
    lone = str(tmp_path / "lone" / "reference")

    doc = _compare(lone, str(tmp_path / "t.npz"), "--no-local")
    v = doc["verdict"]
    assert v["kind"] == "undecided", v["summary"]  # main said "precision" here
    assert v["evidence"]["missing"] == ["fp16_floor", "local_rerun"]
    assert doc["first_failing"]["op"] == node
    assert "Missing: an fp16 floor" in v["summary"] and v["confidence"] < 0.5
    steps = [s["cli"] for s in doc["next_steps"]]
    assert steps[0].startswith(f"qnn-debug baseline {tmp_path / 'm.onnx'} --inputs \"$INPUTS\"")
    assert steps[1].startswith('qnn-debug compare "$NEW_BASELINE"')

    # what it said was missing, given: the floor and the re-run name the op as a real bug
    full = _compare(str(tmp_path / "base"), str(tmp_path / "t.npz"), "--model", str(tmp_path / "m.onnx"))
    assert full["verdict"]["kind"] == "real_bug" and full["first_failing"]["op"] == node
    # a floor alone (no re-run) is enough to judge against: not undecided
    floored = _compare(str(tmp_path / "base"), str(tmp_path / "t.npz"), "--no-local")
    assert floored["verdict"]["kind"] != "undecided"


def test_a_healthy_target_without_a_floor_is_still_ok(tmp_path: Path) -> None:
    onnx.save(small_cnn(), str(tmp_path / "m.onnx"))
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", mnn_gate=False)
    floor = load_run(tmp_path / "base" / "fp16_floor")
    np.savez(tmp_path / "t.npz", **{t.name: np.array(floor.array(t.name)) for t in floor.tensors})
    doc = _compare(str(tmp_path / "base" / "reference"), str(tmp_path / "t.npz"), "--no-local")
    assert doc["verdict"]["kind"] == "ok", doc["verdict"]["summary"]
