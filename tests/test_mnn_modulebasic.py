"""ModuleBasic: command line, parsing of its real logs (HTP simulator), judging against max |reference|."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.mnn.modulebasic import (
    ModuleBasicArgs,
    build_command,
    forward_type,
    judge,
    parse_output,
    precision_value,
)


def _log(mnn_fixtures: Path, name: str) -> str:
    return (mnn_fixtures / "logs" / name).read_text(encoding="utf-8")


def _ref(mnn_fixtures: Path) -> np.ndarray:
    return np.loadtxt(mnn_fixtures / "testdir" / "y.txt")


def test_command_line_positions() -> None:
    args = ModuleBasicArgs(model="m.mnn", testdir="d", forward=5, loops=3, precision=2, memory=1, power=2)
    assert args.mask == 2 + 4 + 32
    assert build_command("./ModuleBasic.out", args) == ["./ModuleBasic.out", "m.mnn", "d", "0", "5", "3", "1", "38"]
    # a later optional argument forces the earlier ones to be written
    args2 = ModuleBasicArgs(model="m.mnn", testdir="d", cpu_ids=[4, 5])
    assert build_command("mb", args2)[-2:] == [".tempcache", "4,5"]
    assert build_command("mb", ModuleBasicArgs(model="m", testdir="d", kleidiai=True))[-3:] == [".tempcache", "", "1"]


def test_forward_and_precision_names() -> None:
    assert (forward_type("qnn"), forward_type("cpu"), forward_type("opencl"), forward_type("5")) == (5, 0, 3, 5)
    assert (precision_value("low"), precision_value("high"), precision_value("normal")) == (2, 1, 0)
    with pytest.raises(BadInputError):
        forward_type("npu")
    with pytest.raises(BadInputError):
        precision_value("fp8")


def test_cpu_log(mnn_fixtures: Path) -> None:
    r = judge(parse_output(_log(mnn_fixtures, "modulebasic_fwd0_p2.log"), 0), references={"y": _ref(mnn_fixtures)})
    assert r.status == "passed"
    # the glued line "unable to load libcdsprpc.soTest convert_cache.mnn from input info: onnx" still parses
    assert (r.model, r.testdir, r.inputs, r.outputs, r.forward_type, r.precision) == (
        "convert_cache.mnn", "onnx", ["x"], ["y"], 0, 2)
    assert [(c.repeat, c.shape, c.mnn_max, c.diffmax) for c in r.checks] == [
        (0, [1, 16, 1, 1], 5.814027, 0.000002), (1, [1, 16, 1, 1], 5.814027, 0.000002)]
    assert r.written == {"y": ["output/0_0.txt", "output/1_0.txt"]}
    assert (r.load_ms, r.avg_ms, r.memory_mb) == (0.273, 0.194, 0.335022)


def test_qnn_online_shape_mutable_false_passes(mnn_fixtures: Path) -> None:
    r = judge(parse_output(_log(mnn_fixtures, "modulebasic_fwd5_p2_mutable_false.log"), 0),
              references={"y": _ref(mnn_fixtures)}, expected_forward=5)
    assert r.status == "passed" and r.forward_type == 5
    j = r.judged[0]
    # measured on the fixture: MNN's signed max is 5.814 but max|y| is 10.468 (y has a -10.468 entry)
    assert j["mnn_diff_rate"] == 0.001213
    assert j["max_abs_reference"] == pytest.approx(10.46799, abs=1e-4)
    assert j["rel_error"] == pytest.approx(0.007055 / 10.46799, rel=1e-4)


def test_qnn_online_shape_mutable_true_fails_despite_exit_0(mnn_fixtures: Path) -> None:
    r = judge(parse_output(_log(mnn_fixtures, "modulebasic_fwd5_p2_mutable_true.log"), 0),
              references={"y": _ref(mnn_fixtures)}, expected_forward=5)
    assert r.returncode == 0 and r.status == "failed"
    assert [e.code for e in r.qnn_errors] == [6000, 6000, 6000]
    assert r.qnn_errors[0].source_line == 2036 and r.qnn_errors[0].source_file.endswith("QNNBackend.cpp")
    assert r.graph_execute_failed == 3 and r.tensor_usage == [1]
    assert all(c.mnn_failed for c in r.checks) and len(r.test_errors) == 4
    assert "6000" in r.reason and "Tensor usage" in r.reason


def test_offline_log(mnn_fixtures: Path) -> None:
    r = judge(parse_output(_log(mnn_fixtures, "modulebasic_offline_fwd0_p2.log"), 0), references={"y": _ref(mnn_fixtures)})
    assert r.status == "passed" and r.offline_plugin
    assert r.model == "qnn_out/convert_cache_69_79.mnn"
    assert r.validate_binary_failed == []  # the SDK's "<E> Failed to validate context binary" is not MNN's failure


def test_signed_max_caveat() -> None:
    """MNN fails an all-negative-dominated output that is within 1 % of max|ref|; we pass it, and vice versa."""
    log = ("Test m.mnn from input info: d\nx\noutput: y\nUse extra forward type: 0\nRun for 0 time\n"
           "before compare y: (2, )\nFor y, max = 1.000000, diffmax = 0.050000, diff rate = 0.050000\n"
           "TESTERROR y value error : absMaxV:1.000000 - DiffMax 0.050000\n0 run Error for output y\n")
    ref = np.array([-10.0, 1.0])
    r = judge(parse_output(log, 0), references={"y": ref}, outputs={"y": np.array([-10.05, 1.0])})
    assert r.checks[0].mnn_failed and r.status == "passed"
    assert r.judged[0]["rel_error"] == pytest.approx(0.005) and r.judged[0]["mnn_failed"] is True
    r2 = judge(parse_output(log.replace("TESTERROR", "x"), 0), references={"y": ref}, outputs={"y": np.array([-8.0, 1.0])})
    assert r2.status == "failed" and "0.2" in r2.reason


@pytest.mark.parametrize("text,rc,status,reason", [
    ("====\nUsage: ./ModuleBasic.out ${test.mnn} ${Dir} [runMask]\n====\n", 0, "error", "usage"),
    ("Test m.mnn from input info: d\nInvalid json\n", 0, "error", "input.json"),
    ("Test m.mnn from input info: d\nx\nUse extra forward type: 0\nError: can't load module\n", 0, "error", "load"),
    ("Test m from input info: d\nx\noutput: y\nUse extra forward type: 0\nRun for 0 time\nError in forward\n", 0, "error", "forward"),
    ("Test m from input info: d\nx\noutput: y\nRun for 0 time\n", -11, "crashed", "-11"),
    ("Test m from input info: d\nx\nUse extra forward type: 5\nCan't Find type=5 backend, use 0 instead\n", 0, "error", "not from QNN"),
    ("Test m from input info: d\nx\noutput: y\nUse extra forward type: 0\nRun for 0 time\nSkip check y\n", 0, "unchecked", "no reference"),
])
def test_failure_classes(text: str, rc: int, status: str, reason: str) -> None:
    r = judge(parse_output(text, rc), expected_forward=5 if "type: 5" in text else None)
    assert r.status == status and reason in r.reason


def test_not_registered_ops_are_named() -> None:
    r = parse_output("MNN_QNN: Not registered type 17, deconv1.\nMNN_QNN: Not registered type 9999, odd.\n")
    assert [(n.type_id, n.op, n.type_name) for n in r.not_registered] == [(17, "deconv1", "Deconvolution"), (9999, "odd", None)]
