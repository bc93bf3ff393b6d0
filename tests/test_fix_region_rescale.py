"""A real overflow only the dump has: llmexport's own ``visual.onnx`` fed massive activations (patches x300), its
decomposed LayerNorms square values to ~4e5. compare from a plain ``.npz`` dump says precision/fp16_range at the
first LayerNorm's Pow, says from the graph and the converted ``.mnn`` that MNN fuses the LayerNorm (the tensor does
not ship), and reports the observer effect (not measured without unmarked outputs; measured with them beside the
dump); ``fix --op LayerNorm`` rescales every LayerNorm (input 2^-k, eps 2^-2k), proven, and the fixed model's dump
compares without a range finding."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from doubles.htp_like import htp_like_dump
from qnn_debug.cli import app
from qnn_debug.compare.pipeline import compare_paths
from real_vl_cases import feeds


def _baseline(model: Path, inputs: Path, out: Path, *gate: str) -> None:
    res = CliRunner().invoke(app, ["baseline", str(model), "--inputs", str(inputs), "--out", str(out), *gate, "--json"])
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def massive(tmp_path_factory: pytest.TempPathFactory, real_exports: Callable[[str, str, str], Path]) -> Path:
    tmp = tmp_path_factory.mktemp("massive")
    shutil.copy(real_exports("qwen3_vl", "a", "onnx") / "onnx" / "visual.onnx", tmp / "visual.onnx")
    model = onnx.load(str(tmp / "visual.onnx"))
    f = feeds(model, float(np.finfo(np.float32).min))
    f["patches"] = f["patches"] * np.float32(300.0)  # massive activations: unnormalised pixels
    np.savez(tmp / "inputs.npz", **f)
    _baseline(tmp / "visual.onnx", tmp / "inputs.npz", tmp / "base")  # with the MNN gate: it converts the .mnn
    np.savez(tmp / "dump.npz", **htp_like_dump(model, f))
    return tmp


def test_overflow_at_a_fused_layernorm_says_it_does_not_ship(massive: Path) -> None:
    r = compare_paths(massive / "base", massive / "dump.npz")
    v = r.verdict
    assert (v.kind, v.pattern) == ("precision", "fp16_range"), v.summary
    assert r.first_failing is not None and r.first_failing.op_type == "Pow"
    ev = v.evidence["fp16_range"]
    assert ev["scale_invariant"] == "LayerNorm" and ev["reference_max_abs"] > 131008
    shipped = ev["shipped"]
    assert shipped["tensor_in_mnn"] is False and shipped["fused_into"]["op_type"] == "LayerNorm"
    assert shipped["layer_norms"] == 9  # 3 blocks x 2, 2 deepstack mergers, the merger
    assert "FuseLayerNorm" in v.summary and "does not hold" in v.summary and "observer effect" in v.summary
    assert v.evidence["observer_effect"].startswith("not measured") and "dump.unmarked.npz" in v.evidence["observer_effect"]


def test_observer_effect_of_a_plain_dump_is_measured_from_unmarked_outputs_beside_it(massive: Path,
                                                                                   tmp_path: Path) -> None:
    dump = tmp_path / "run.npz"
    shutil.copy(massive / "dump.npz", dump)
    with np.load(dump) as z:
        outs = {k: np.asarray(z[k]) for k in ("image_embeds", "deepstack_feature")}
    np.savez(tmp_path / "run.unmarked.npz", **{k: v * np.float32(1.01) for k, v in outs.items()})
    r = compare_paths(massive / "base", dump)
    assert r.observer_effect_db is not None and set(r.observer_effect_db) == set(outs)
    assert all(39.0 < db < 41.0 for db in r.observer_effect_db.values())  # a 1 % change: 40 dB
    assert "from run.unmarked.npz" in r.verdict.evidence["observer_effect"]


def test_fix_op_layernorm_rescales_every_layernorm_and_the_fixed_dump_is_clean(massive: Path, tmp_path: Path) -> None:
    r = compare_paths(massive / "base", massive / "dump.npz", json_path=tmp_path / "cmp.json")
    assert r.verdict.pattern == "fp16_range"
    res = CliRunner().invoke(app, ["fix", str(tmp_path / "cmp.json"), "--op", "LayerNorm",
                                   "--model", str(massive / "visual.onnx"), "--out", str(tmp_path / "fix"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    fixed = doc.get("result", doc)
    assert fixed["kind"] == "region_rescale" and fixed["proven"], fixed
    assert len(fixed["sites"]) == 9 and {s["exponent"] for s in fixed["sites"]} == {3}
    path = Path(fixed["artefact"])
    assert path.name == "visual.fp16-rescaled-layernorm.onnx" and (massive / "visual.onnx").is_file()
    # the fixed model, baseline and dump again: no range finding left
    m = onnx.load(str(path))
    with np.load(massive / "inputs.npz") as z:
        f = {k: np.asarray(z[k]) for k in z.files}
    _baseline(path, massive / "inputs.npz", tmp_path / "base2", "--no-mnn-gate")
    np.savez(tmp_path / "dump2.npz", **htp_like_dump(m, f))
    r2 = compare_paths(tmp_path / "base2", tmp_path / "dump2.npz")
    assert r2.verdict.pattern != "fp16_range", r2.verdict.summary
    report = json.loads((tmp_path / "base2" / "baseline.json").read_text())
    assert report["ranges"]["unsafe_count"] == 0, report["ranges"]


def test_fix_op_refuses_what_it_cannot_rescale(massive: Path, tmp_path: Path) -> None:
    compare_paths(massive / "base", massive / "dump.npz", json_path=tmp_path / "cmp.json")
    res = CliRunner().invoke(app, ["fix", str(tmp_path / "cmp.json"), "--op", "Softmax", "--model",
                                   str(massive / "visual.onnx"), "--json"])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["error"] == "bad_input" and "LayerNorm" in doc["hint"]
