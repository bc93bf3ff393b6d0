"""When the target ran another model than the reference's, compare says so first and names the op that ran; the
first failing op's probe carries its real shapes and attributes and runs as printed.

An assistant diagnosing an edited model (an Add turned into a Sub) against the original was told the Add failed
and sent to `op Add --probe` on a default 1x3x32x32 shape."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from numerics_models import decoder_llm, l2norm_net, pixels, token_ids
from qnn_debug.cli import app


def _cli(*args: str) -> dict:
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _edited(model: onnx.ModelProto, node: str, op_type: str) -> onnx.ModelProto:
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    target = next(n for n in edited.graph.node if n.name == node)
    target.op_type = op_type
    return edited


CASES = {
    "decoder": (lambda: decoder_llm(hidden=64, layers=2, tokens=16, big_value=20.0), "l1_residual1", "Sub",
                lambda: {"ids": token_ids(16, 96)}),
    "l2norm": (lambda: l2norm_net(channels=3, size=16, scale=1 / 256), "scale_out", "Div",
               lambda: {"x": pixels(3, 16)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compare_says_the_target_ran_another_model_and_names_the_op_that_ran(tmp_path: Path, case: str) -> None:
    build, node, new_op, feeds = CASES[case]
    clean = build()
    onnx.save(clean, str(tmp_path / "clean.onnx"))
    onnx.save(_edited(clean, node, new_op), str(tmp_path / "edited.onnx"))
    np.savez(tmp_path / "in.npz", **feeds())
    _cli("baseline", str(tmp_path / "clean.onnx"), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "b"),
         "--no-mnn-gate")
    _cli("dump", str(tmp_path / "edited.onnx"), "--target", "htp-sim", "--inputs", str(tmp_path / "b" / "inputs.npz"),
         "--out", str(tmp_path / "run"))
    r = _cli("compare", str(tmp_path / "b"), str(tmp_path / "run"))
    assert r["warnings"][0].startswith("the target ran edited.onnx, not the reference's clean.onnx: 1 node(s) differ")
    ff = r["first_failing"]
    assert ff["op"] == node and ff["op_type"] == new_op, ff
    assert ff["model_op_type"] == next(n.op_type for n in clean.graph.node if n.name == node)
    assert "The two models differ at this op" in r["verdict"]["summary"]
    probe = next(s for s in r["next_steps"] if s["tool"] == "lookup_op_constraints")
    argv = shlex.split(probe["cli"])[1:]
    assert argv[:3] == ["op", new_op, "--probe"] and "--shape" in argv, probe["cli"]
    res = CliRunner().invoke(app, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    shapes = [argv[i + 1] for i, a in enumerate(argv) if a == "--shape"]
    ref_shape = json.loads((tmp_path / "b" / "reference" / "run.json").read_text())
    dims = {t["name"]: t["shape"] for t in ref_shape["tensors"]}
    first_input = next(n for n in clean.graph.node if n.name == node).input[0]
    assert shapes[0].split(":")[0] == "x".join(map(str, dims[first_input]))


def test_the_probe_of_a_reduction_keeps_its_axes_as_values(tmp_path: Path) -> None:
    """A failing ReduceSum is probed with its real axes (int64 values), not random integers."""
    model = l2norm_net(channels=3, size=16, variant="channel")
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=pixels(3, 16))
    r = _cli("diagnose", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "d"),
             "--no-mnn-gate")
    ff = r["compare"]["first_failing"]
    if ff["op_type"] == "ReduceSum":
        assert "1:int64=1" in ff["probe"], ff["probe"]
    else:  # the square leaves fp16 first: a Mul of two real-shaped inputs
        assert ff["probe"] == ["--shape", "1x3x16x16:float32", "--shape", "1x3x16x16:float32"], ff["probe"]
    assert not any("the target ran" in w for w in r["compare"]["warnings"])
