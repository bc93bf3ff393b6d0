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
