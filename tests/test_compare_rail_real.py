"""The fp16-rail rule on graphs we did not write: MNN llmexport's own ``visual.onnx`` (two toy Qwen3-VL sizes,
random weights; an additive block-diagonal mask the exporter fills with float32's lowest) with the mask set to
each fill value an exporter writes. Healthy runs are ``ok``; a vision rotary reading its rows swapped and an
attention residual Add dropped after the first mask Add are named with their pattern, from an ``.npz`` dump."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from real_vl_cases import run_real_case

FILLS = [("-65504", -65504.0), ("-1e4", -1e4), ("-1e9", -1e9), ("float lowest", float(np.finfo(np.float32).min)),
         ("-inf", float("-inf"))]


# by default fp16's lowest, the exporter's own fill and -inf on the first size and fp16's lowest on the second;
# the other fills with the scale runs (all 21 pass)
DEFAULT = {("a", "-65504"), ("a", "float lowest"), ("a", "-inf"), ("b", "-65504")}
CASES = [pytest.param(size, label, fill, fault, id=f"{size}-{label}-{fault or 'healthy'}",
                      marks=() if (size, label) in DEFAULT else (pytest.mark.scale,))
         for size in ("a", "b") for label, fill in FILLS if size == "a" or label in ("-65504", "float lowest")
         for fault in (None, "rows_swapped", "residual_dropped")]


@pytest.mark.parametrize(("size", "label", "fill", "fault"), CASES)
def test_real_visual_export_whatever_the_mask(tmp_path: Path, real_exports: Callable[[str, str, str], Path],
                                              size: str, label: str, fill: float, fault: str | None) -> None:
    visual = real_exports("qwen3_vl", size, "onnx") / "onnx" / "visual.onnx"
    r, dropped = run_real_case(tmp_path, visual, fill, fault)
    v = r.verdict
    assert v.pattern != "fp16_range", v.summary
    if fault is None:
        assert v.kind == "ok", v.summary
    elif fault == "rows_swapped":
        assert (v.kind, v.pattern) == ("real_bug", "rotary_layout"), v.summary
        assert "rows swapped" in v.summary
    else:
        assert (v.kind, v.pattern) == ("real_bug", "missing_op"), v.summary
        assert r.first_failing is not None and r.first_failing.op == dropped, v.summary
    if label == "-65504":  # the mask Adds leave the range by a hair: notes, never the answer
        notes = v.evidence.get("rail_harmless") or []
        assert notes and all(n["absorbed_by"][0]["op_type"] == "Softmax" for n in notes), notes
