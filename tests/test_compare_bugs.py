"""Injected single-op bugs on the real HTP simulator are named exactly, with the right kind and pattern.

Each case edits the model with ``qnn_debug.inject`` (tensor names kept), dumps the edited model on the
htp-sim target with the baseline's inputs, and compares against the baseline of the *original* model —
a realistic buggy QNN run with real fp16 noise whose answer is known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

from compare_models import mixed_ops_net
from qnn_debug.baseline import run_baseline
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.compare.schema import CompareResult
from qnn_debug.dump import run_dump
from qnn_debug.examples import deep_conv_net
from qnn_debug.inject import inject
from qnn_debug.targets import DumpRequest


def _baseline(root: Path, model: onnx.ModelProto) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(root / "model.onnx"))
    run_baseline(root / "model.onnx", root / "base", mnn_gate=False)
    return root


def _diagnose_edit(root: Path, name: str, model: onnx.ModelProto) -> CompareResult:
    path = root / f"{name}.onnx"
    onnx.save(model, str(path))
    run_dump(DumpRequest(model=path, out=root / name, inputs=root / "base" / "inputs.npz"))
    return compare_paths(root / "base", root / name)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _baseline(tmp_path_factory.mktemp("mixed"), mixed_ops_net())


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _baseline(tmp_path_factory.mktemp("deep"), deep_conv_net(blocks=12))


def test_healthy_runs_are_ok_without_first_failing(mixed: Path, deep: Path):
    for root, model in ((mixed, mixed_ops_net()), (deep, deep_conv_net(blocks=12))):
        result = _diagnose_edit(root, "healthy", model)
        assert result.verdict.kind in ("ok", "precision"), result.verdict.summary
        assert result.first_failing is None
        assert result.counts["unaligned"] == 0 and result.counts["aligned"] == len(result.tensors)


# (name, injection, node, params, expected kind, expected first failing op, expected pattern)
MIXED_CASES: list[tuple[str, str, str | None, dict[str, Any], str, str, str]] = [
    ("zero_input", "zero_input", None, {}, "input_not_copied", "conv1", "zero_input"),
    ("conv_on_zeros", "conv_on_zeros", "conv2", {}, "real_bug", "conv2", "bias_only"),
    ("nhwc_flatten", "nhwc_flatten", "flatten", {}, "real_bug", "flatten", "permutation"),
    ("resize_mode", "resize_coordinates", "resize", {"mode": "asymmetric"}, "real_bug", "resize", "wrong_coordinates"),
    ("softmax_axis", "softmax_axis", "softmax", {"axis": 3}, "real_bug", "softmax", "wrong_semantics"),
    ("scaled_relu", "scale_output", "relu1", {"factor": 0.5}, "real_bug", "relu1", "scale_shift"),
]


@pytest.mark.parametrize(("name", "kind", "node", "params", "want_kind", "want_op", "want_pattern"), MIXED_CASES,
                         ids=[c[0] for c in MIXED_CASES])
def test_injected_single_op_bug_is_named(mixed: Path, name: str, kind: str, node: str | None, params: dict[str, Any],
                                         want_kind: str, want_op: str, want_pattern: str):
    result = _diagnose_edit(mixed, name, inject(mixed_ops_net(), kind, node, **params))
    ff = result.first_failing
    assert (result.verdict.kind, ff.op if ff else None, result.verdict.pattern) == (want_kind, want_op, want_pattern), \
        result.verdict.summary
    assert ff is not None and ff.local_error is not None and ff.local_error.ok is False
    assert result.verdict.evidence["jump_db"] >= 15.0
    # the injected helper tensors are listed as target-only, never dropped
    assert all(u.side == "target" and "__qd_inject" in u.name for u in result.unaligned)


DEEP_CASES = [
    ("early", [("conv_on_zeros", "b1_conv", {})], "b1_conv", "bias_only"),
    ("late", [("scale_output", "b10_bn", {"factor": 1.5})], "b10_bn", "scale_shift"),
    ("two_bugs", [("scale_output", "b2_relu", {"factor": 0.7}), ("conv_on_zeros", "b9_conv", {})], "b2_relu", "scale_shift"),
    ("fc_without_bias", [("drop_bias", "fc", {})], "fc", "wrong_semantics"),
]


@pytest.mark.parametrize(("name", "edits", "want_op", "want_pattern"), DEEP_CASES, ids=[c[0] for c in DEEP_CASES])
def test_deep_net_bugs_are_named_where_they_start(deep: Path, name: str, edits: list[tuple[str, str, dict[str, Any]]],
                                                 want_op: str, want_pattern: str):
    model = deep_conv_net(blocks=12)
    for kind, node, params in edits:
        model = inject(model, kind, node, **params)
    result = _diagnose_edit(deep, name, model)
    ff = result.first_failing
    assert result.verdict.kind == "real_bug", result.verdict.summary
    assert ff is not None and ff.op == want_op and result.verdict.pattern == want_pattern
    # and the damage reaches the model output, far below the floor's error
    out = result.verdict.evidence["end_to_end"]["prob"]
    assert out["sqnr_db"] < out["floor_sqnr_db"] - 10
