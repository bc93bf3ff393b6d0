"""bisect starts its search when the final outputs are off by compare's own output rule (10 dB beyond the fp16
floor), not only when they pass the 15 dB an intermediate tensor needs: at 0.6B width a broken rotary two layers
before the head left the logits 13.4 dB beyond the floor and bisect stopped after one probe. Here a rotary whose
rotate_half is zeroed in the last layer leaves the logits 10.8 / 14.5 dB beyond the floor (3 / 4 layers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from numerics_models import decoder_llm, token_ids
from qnn_debug.cli import app


def _rotary_without_rotate_half(model: onnx.ModelProto, layer: int) -> onnx.ModelProto:
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    bad.graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero_factor"))
    for i, n in enumerate(bad.graph.node):
        if n.name == f"l{layer}_rope_k_neg":
            bad.graph.node[i].CopyFrom(helper.make_node("Mul", [n.input[0], "zero_factor"], list(n.output), name=n.name))
    return bad


@pytest.mark.parametrize("layers", [3, 4])
def test_bisect_searches_when_the_outputs_are_off_by_compares_rule(tmp_path: Path, layers: int) -> None:
    clean = decoder_llm(hidden=64, layers=layers, tokens=16, big_value=20.0)
    onnx.save(clean, str(tmp_path / "clean.onnx"))
    onnx.save(_rotary_without_rotate_half(clean, layers - 1), str(tmp_path / "bad.onnx"))
    np.savez(tmp_path / "in.npz", ids=token_ids(16, 96))
    res = CliRunner().invoke(app, ["bisect", str(tmp_path / "bad.onnx"), "--reference-model", str(tmp_path / "clean.onnx"),
                                   "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    final = r["probes"][0]["worst"]
    assert 10.0 <= final["excess_db"] < 15.0 and not r["probes"][0]["bad"], final  # the case this is about
    assert r["verdict"] == "real_bug" and r["first_failing"]["op"] == f"l{layers - 1}_rope_k_neg", r["summary"]
