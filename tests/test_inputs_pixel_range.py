"""Generated inputs follow the range the model's own first operation expects (raw pixels for a model that
normalises them), and every report says what generated data cannot show.

An assistant diagnosing an L2-norm net with no --inputs was told the run was healthy: generated data in
[0, 1] went through the model's own ``x / 255`` and never reached fp16's range, while the application's
pixels overflowed it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from qnn_debug.cli import app


def _pixel_net(first: str, *, channels: int = 3, size: int = 16, gain: float = 200.0) -> onnx.ModelProto:
    """x (raw pixels) → normalised by ``first`` → Conv 1x1 with a large gain → channel L2-norm.

    With pixels the squared sum reaches ~1e5 (> 65504, fp16's maximum); with [0, 1] data it stays below 1."""
    rng = np.random.default_rng(1)
    out_ch = 4
    inits = [numpy_helper.from_array(np.asarray(gain * rng.uniform(0.6, 1.0, (out_ch, channels, 1, 1)), np.float32), "w"),
             numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    if first == "div":
        inits.append(numpy_helper.from_array(np.array(255.0, np.float32), "k"))
        head = [helper.make_node("Div", ["x", "k"], ["xn"], name="to_unit")]
    elif first == "mul":
        inits.append(numpy_helper.from_array(np.array(1 / 255, np.float32), "k"))
        head = [helper.make_node("Mul", ["k", "x"], ["xn"], name="to_unit")]
    elif first == "sub":
        inits.append(numpy_helper.from_array(np.full((1, channels, 1, 1), 127.5, np.float32), "mean"))
        inits.append(numpy_helper.from_array(np.array(1 / 127.5, np.float32), "inv_std"))
        head = [helper.make_node("Sub", ["x", "mean"], ["xc"], name="centre"),
                helper.make_node("Mul", ["xc", "inv_std"], ["xn"], name="to_unit")]
    else:
        head = [helper.make_node("Identity", ["x"], ["xn"], name="to_unit")]
    nodes = [*head,
             helper.make_node("Conv", ["xn", "w"], ["feat"], name="mix"),
             helper.make_node("Mul", ["feat", "feat"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], name="sumsq", keepdims=1),
             helper.make_node("Add", ["sumsq", "eps"], ["sumsq_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["sumsq_eps"], ["norm"], name="norm"),
             helper.make_node("Div", ["feat", "norm"], ["y"], name="normalize")]
    graph = helper.make_graph(nodes, f"pixel_{first}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_ch, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _cli(*args: str) -> dict:
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("first, words", [("div", "divides it by 255"), ("mul", "multiplies it by 0.00392"),
                                          ("sub", "subtracts a mean of 127.5")])
def test_generated_inputs_are_raw_pixels_for_a_model_that_normalises_them(tmp_path: Path, first: str, words: str) -> None:
    onnx.save(_pixel_net(first), str(tmp_path / "m.onnx"))
    r = _cli("baseline", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "b"), "--no-mnn-gate")
    note = r["report"]["inputs"]["note"]
    assert "'x' scaled to 0..255" in note and words in note
    x = np.load(r["inputs_path"])["x"]
    assert 200 <= x.max() <= 255 and x.min() >= 0 and np.all(x == np.round(x))
    human = CliRunner().invoke(app, ["baseline", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "b"),
                                     "--no-mnn-gate", "--force"])
    assert "inputs note: 'x' scaled to 0..255" in human.output


def test_a_model_without_normalisation_is_told_what_generated_data_cannot_show(tmp_path: Path) -> None:
    onnx.save(_pixel_net("none"), str(tmp_path / "m.onnx"))
    r = _cli("baseline", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "b"), "--no-mnn-gate")
    note = r["report"]["inputs"]["note"]
    assert "'x' generated in [0, 1]" in note and "--inputs FILE.npz" in note
    assert np.load(r["inputs_path"])["x"].max() <= 1.0


def test_given_inputs_carry_no_note(tmp_path: Path) -> None:
    onnx.save(_pixel_net("div"), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=np.full((1, 3, 16, 16), 3.0, np.float32))
    r = _cli("baseline", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "b"), "--no-mnn-gate",
             "--inputs", str(tmp_path / "in.npz"))
    assert r["report"]["inputs"]["note"] is None


@pytest.mark.parametrize("first", ["div", "mul"])
def test_diagnose_with_no_inputs_finds_the_overflow_the_applications_pixels_cause(tmp_path: Path, first: str) -> None:
    onnx.save(_pixel_net(first), str(tmp_path / "m.onnx"))
    r = _cli("diagnose", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "d"), "--no-mnn-gate")
    assert "scaled to 0..255" in r["inputs_note"]
    verdict = r["compare"]["verdict"]
    assert verdict["kind"] != "ok", verdict
    assert r["compare"]["first_failing"]["op"] in {"square", "sumsq"}, r["compare"]["first_failing"]
