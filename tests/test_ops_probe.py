"""The empirical probe: one-op ONNX graphs on the real HTP simulator (QNN EP, CPU fallback forbidden)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.ops import lookup_op_constraints
from qnn_debug.ops.probe import parse_attr, parse_input_spec


def test_rejected_op_reports_qnns_own_reason() -> None:
    r = lookup_op_constraints("Mod", probe=True, shapes=["1x64", "1x64"], attrs=["fmod=1"])
    assert r.probe is not None and not r.probe.accepted and r.probe.stage == "create"
    assert any("fmod == 0" in m for m in r.probe.qnn_messages)


def test_accepted_op_with_constant_inputs_and_attributes() -> None:
    res = CliRunner().invoke(app, ["op", "Conv", "--probe", "--shape", "1x3x8x8", "--shape", "4x3x3x3",
                                   "--attr", "pads=1,1,1,1", "--json"])
    assert res.exit_code == 0, res.stdout
    probe = json.loads(res.stdout)["probe"]
    assert probe["accepted"] and probe["stage"] == "run"
    assert probe["inputs"] == ["1x3x8x8:float32", "4x3x3x3:float32"]


def test_invalid_node_is_caught_before_qnn() -> None:
    r = lookup_op_constraints("MatMul", probe=True, shapes=["1x16x32", "31x8"])
    assert r.probe is not None and not r.probe.accepted and r.probe.stage == "build"
    assert "ONNX rejects" in r.probe.message


@pytest.mark.parametrize("spec", ["1x3xq", "2:int64=1", "3:complex64", "5000x5000"])
def test_bad_shape_specs(spec: str) -> None:
    with pytest.raises(BadInputError):
        parse_input_spec(spec)


def test_spec_and_attr_parsing() -> None:
    s = parse_input_spec("4:int64=0,3,5,7")
    assert s.dims == [4] and s.dtype == "int64" and s.values == [0, 3, 5, 7]
    assert parse_attr("pads=1,1,1,1") == ("pads", [1, 1, 1, 1])
    assert parse_attr("mode=linear") == ("mode", "linear")
    assert parse_attr("alpha=0.5") == ("alpha", 0.5)
    with pytest.raises(BadInputError):
        parse_attr("novalue")
