"""An op the simulator rejects but MNN supports gets an equivalent rewrite tried for the simulator run;
op names the tools print as next steps resolve (no 'unknown op' for ReduceSumSquare, no duplicate hints)."""

from __future__ import annotations

import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.ops import lookup_op_constraints
from qnn_debug.ops.lookup import op_next_step


def test_reduce_sum_square_is_known_and_its_rewrite_runs_on_the_simulator() -> None:
    r = lookup_op_constraints("ReduceSumSquare", probe=True, shapes=["1x8x16x16", "1:int64=1"])
    assert [m.optype for m in r.mnn] == ["UnaryOp", "Reduction"]  # measured: MNN converts it to SQUARE + SUM
    assert r.probe is not None and not r.probe.accepted and r.probe.stage == "create"
    rw = r.probe.rewrite
    assert rw is not None and rw.accepted and rw.nodes == ["Mul", "ReduceSum"]
    assert any("ReduceSum(Mul(x, x))" in f.text for f in r.facts)


def test_accepted_ops_get_no_rewrite() -> None:
    r = lookup_op_constraints("ReduceSum", probe=True, shapes=["1x8x16x16", "1:int64=1"])
    assert r.probe is not None and r.probe.accepted and r.probe.rewrite is None


def test_suggestions_are_unique_and_next_steps_run() -> None:
    with pytest.raises(BadInputError) as e:
        lookup_op_constraints("ReduceSumSq")
    hint = e.value.hint or ""
    names = [n.strip(" ?") for n in hint.removeprefix("did you mean ").split(",")]
    assert len(names) == len(set(names)) and "ReduceSumSquare" in names
    assert op_next_step("ReduceSumSquare") == ("qnn-debug op ReduceSumSquare --probe",
                                               "look up its QNN/HTP constraints and probe it alone on the HTP simulator")
    assert op_next_step("NoSuchOp") is None and op_next_step("bad name; rm") is None


@pytest.mark.parametrize(("op", "probed"), [("Conv2d", "Conv"), ("DepthWiseConv2d", "Conv"), ("StridedSlice", "Slice"),
                                            ("ElementWiseAdd", "Add"), ("Interp", "Resize"), ("Softmax", "Softmax")])
def test_a_probe_builds_the_onnx_op_that_emits_the_named_op_first(op: str, probed: str) -> None:
    from qnn_debug.ops.lookup import probe_target

    assert probe_target(lookup_op_constraints(op)) == probed
    assert op_next_step(op) == (f"qnn-debug op {op} --probe",
                                "look up its QNN/HTP constraints and probe it alone on the HTP simulator")


@pytest.mark.parametrize("op", ["Dequantize", "Quantize", "Int8ToFloat"])
def test_an_op_only_emitted_inside_another_is_not_probed_as_that_other_op(op: str) -> None:
    """QNN Dequantize is also emitted by a quantized Convolution: probing a Conv would answer another question."""
    assert op_next_step(op) == (f"qnn-debug op {op}", "look up its QNN/HTP constraints and MNN's mapping (no ONNX op to probe)")
    with pytest.raises(BadInputError) as e:
        lookup_op_constraints(op, probe=True)
    assert "nothing to probe" in e.value.message


def _l2norm_reduce_sum_square(opset: int):
    """x / sqrt(ReduceSumSquare(x) + eps) over channels; axes as an attribute before opset 18, an input from it on."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
        rss = helper.make_node("ReduceSumSquare", ["x", "axes"], ["ss"], name="sumsq", keepdims=1)
    else:
        rss = helper.make_node("ReduceSumSquare", ["x"], ["ss"], name="sumsq", keepdims=1, axes=[1])
    nodes = [rss, helper.make_node("Add", ["ss", "eps"], ["ss_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["ss_eps"], ["norm"], name="norm"),
             helper.make_node("Div", ["x", "norm"], ["y"], name="normalize")]
    graph = helper.make_graph(nodes, "l2_rss", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [13, 18])
def test_diagnose_lowers_reduce_sum_square_for_the_simulator_and_says_so(tmp_path, opset: int) -> None:
    """The simulator refuses ReduceSumSquare; the run gets ReduceSum(Mul(x, x)) as MNN's converter lowers it,
    under the node's own name, with a warning — no graph surgery left to the user."""
    import json

    import numpy as np
    import onnx
    from typer.testing import CliRunner

    from qnn_debug.cli import app
    from qnn_debug.runstore import load_run

    onnx.save(_l2norm_reduce_sum_square(opset), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(opset).normal(0, 1, (1, 8, 8, 8)).astype(np.float32))
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                   "--out", str(tmp_path / "d"), "--no-mnn-gate", "--json"])
    assert res.exit_code == 0, res.output
    c = json.loads(res.stdout)["compare"]
    assert c["verdict"]["kind"] == "ok", c["verdict"]["summary"]
    said = [w for w in c["warnings"] if "ReduceSumSquare 'sumsq' rewritten to ReduceSum(Mul(x, x))" in w]
    assert said and "MNN's converter" in said[0]
    run = load_run(tmp_path / "d" / "htp-sim")
    assert any("ReduceSumSquare" in w for w in run.record.warnings)
    assert run.has("ss") and run.info("ss").op == "sumsq"  # the sum keeps the node's name and output
