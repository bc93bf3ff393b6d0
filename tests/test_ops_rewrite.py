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
