"""compare on real MNN QNN dumps: backend stages that stand for model tensors become rows, not leftovers.

The dumps are the shared fixtures MNN's own QNN backend wrote on the HTP simulator. Their target-only
tensors are the backend's fp16 copy of input x (``x@cast``), MNN's ConvertTensor copies (``x___tr4c1``,
``y__before_tr``), the output before the backend's fp32 Cast (``y@cast``) and conv1 before its fused ReLU
(``c1@ReluTensor``, which is ONNX tensor ``c1``). Edited copies of a dump are named test doubles.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.compare.align import align
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.mnn.equivalence import layout_class, of_stage
from qnn_debug.mnn.model_reader import MnnModel, MnnOp
from qnn_debug.runstore import Equivalence, RunRecord, RunWriter, load_run

FP16_DUMPS = ["online_fp16", "offline_fp16"]
ALIASES = {"x@cast": "x", "x___tr4c1": "x", "c1@ReluTensor": "c1", "y__before_tr": "y", "y@cast": "y"}


@pytest.fixture(scope="module")
def base(mnn_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baseline of the fixture ONNX model on the fixture input; it records the model's path."""
    d = tmp_path_factory.mktemp("mnn_aliases")
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    np.savez(d / "inputs.npz", x=x)
    run_baseline(mnn_fixtures / "testdir" / "test.onnx", d / "base", inputs=d / "inputs.npz", mnn_gate=False)
    return d / "base"


def _dump_double(mnn_fixtures: Path, tmp_path: Path, name: str) -> Path:
    dump = tmp_path / name
    shutil.copytree(mnn_fixtures / "dumps" / "online_fp16", dump)
    return dump


@pytest.mark.parametrize("dump", [*FP16_DUMPS, "online_fp32"])
def test_every_stage_of_a_real_dump_is_aligned_to_the_tensor_it_stands_for(mnn_fixtures: Path, base: Path,
                                                                            dump: str):
    result = compare_paths(base, mnn_fixtures / "dumps" / dump, mnn_model=mnn_fixtures / "test.mnn",
                           model=mnn_fixtures / "testdir" / "test.onnx")
    assert result.verdict.kind == "ok" and result.first_failing is None, result.verdict.summary
    assert result.unaligned == []
    rows = {r.name: r for r in result.tensors}
    want = {k: v for k, v in ALIASES.items() if dump != "online_fp32" or "@cast" not in k}
    assert {n: r.stands_for for n, r in rows.items() if r.stands_for} == want
    assert rows["c1@ReluTensor"].label == "c1@ReluTensor ≡ c1" and rows["c1@ReluTensor"].op == "conv1"
    assert "relu1 (Relu) reads c1" in (rows["c1@ReluTensor"].equivalence or "")
    # x (never dumped by QNN) and c1 (fused into conv1) are compared through their stages
    covered = {r.stands_for or r.name for r in result.tensors}
    assert covered == {"x", "c1", "r1", "c2", "y"}
    floor_db = 100.0 if dump == "online_fp32" else 55.0
    assert all((r.metrics["sqnr_db"] or 0.0) > floor_db and r.status == "ok" for r in result.tensors)
    assert result.counts["aliases"] == len(want) and result.counts["aligned"] == len(result.tensors)
    # rows sit in execution order: x's observations first, then conv1's stage before relu1's output
    order = [r.name for r in result.tensors]
    assert order.index("c1@ReluTensor") < order.index("r1") < order.index("c2") < order.index("y")
    assert all(rows[n].position == -1 for n in want if want[n] == "x")


def test_cli_aligns_stages_with_the_model_the_baseline_recorded(mnn_fixtures: Path, base: Path):
    out = CliRunner().invoke(app, ["compare", str(base), str(mnn_fixtures / "dumps" / "online_fp16"),
                                   "--mnn-model", str(mnn_fixtures / "test.mnn"), "--json"])
    assert out.exit_code == 0, out.stdout
    doc = json.loads(out.stdout)
    assert doc["verdict"]["kind"] == "ok" and doc["unaligned"] == []
    assert doc["counts"]["aligned"] == 8 and doc["counts"]["aliases"] == 5
    labels = {t["label"] for t in doc["tensors"] if t["label"]}
    assert {"x@cast ≡ x", "x___tr4c1 ≡ x", "c1@ReluTensor ≡ c1", "y__before_tr ≡ y", "y@cast ≡ y"} == labels
    # the model output's end-to-end numbers are those of the output the application reads (t5, fp32)
    assert doc["verdict"]["evidence"]["end_to_end"]["y"]["sqnr_db"] == pytest.approx(
        next(t["metrics"]["sqnr_db"] for t in doc["tensors"] if t["name"] == "y"), abs=0.05)


def test_without_the_onnx_model_the_pre_activation_stage_is_an_explained_leftover(
        mnn_fixtures: Path, tmp_path: Path):
    model = tmp_path / "test.onnx"
    shutil.copy(mnn_fixtures / "testdir" / "test.onnx", model)
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    np.savez(tmp_path / "inputs.npz", x=x)
    run_baseline(model, tmp_path / "base", inputs=tmp_path / "inputs.npz", mnn_gate=False)
    model.unlink()  # the baseline's recorded model is gone and no --model is given
    result = compare_paths(tmp_path / "base", mnn_fixtures / "dumps" / "online_fp16", mnn_model=mnn_fixtures / "test.mnn")
    left = {(u.side, u.name): u.reason for u in result.unaligned}
    assert set(left) == {("reference", "c1"), ("target", "c1@ReluTensor")}
    assert "before its fused activation" in left["target", "c1@ReluTensor"]
    assert "needs the ONNX model (pass --model)" in left["target", "c1@ReluTensor"]
    assert {r.stands_for for r in result.tensors if r.stands_for} == {"x", "y"}  # the other stages still align
    assert result.verdict.kind == "ok"


def test_zeroed_input_cast_stage_is_input_not_copied_at_conv1(mnn_fixtures: Path, base: Path, tmp_path: Path):
    # Test double: the real online fp16 dump with the backend's fp16 copy of input x (t0_cast) zeroed,
    # as MNN's shapeMutable=true failure leaves it.
    dump = _dump_double(mnn_fixtures, tmp_path, "zeroed_input_cast_double")
    raw = next(dump.glob("*_t0_cast.raw"))
    raw.write_bytes(bytes(raw.stat().st_size))
    result = compare_paths(base, dump, mnn_model=mnn_fixtures / "test.mnn")
    assert result.verdict.kind == "input_not_copied" and result.verdict.pattern == "zero_input"
    ff = result.first_failing
    assert ff is not None and (ff.tensor, ff.op, ff.op_type, ff.position) == ("c1", "conv1", "Conv", 0)
    assert ff.observed_as == "c1@ReluTensor"
    assert result.verdict.evidence["zero_observations"] == ["x@cast"]
    rows = {r.name: r for r in result.tensors}
    assert rows["x@cast"].status == "bad" and rows["x___tr4c1"].status == "ok"
    # localisation read x from its first observation (the zeroed cast stage): conv1 shows no jump
    assert (rows["c1@ReluTensor"].jump_db or 0.0) < 0
    assert any("observations of 'x' disagree" in w for w in result.warnings)
    assert result.unaligned == []


def test_wrong_pre_activation_stage_is_localised_to_conv1_through_its_alias(mnn_fixtures: Path, base: Path,
                                                                           tmp_path: Path):
    # Test double: conv1's pre-activation stage halved (a wrong conv scale), everything else as MNN wrote it.
    dump = _dump_double(mnn_fixtures, tmp_path, "halved_conv1_stage_double")
    raw = next(dump.glob("*_c1_ReluTensor.raw"))
    raw.write_bytes((np.fromfile(raw, dtype="<f2") * np.float16(0.5)).astype("<f2").tobytes())
    result = compare_paths(base, dump, mnn_model=mnn_fixtures / "test.mnn")
    ff = result.first_failing
    assert result.verdict.kind == "real_bug" and result.verdict.pattern == "scale_shift", result.verdict.summary
    assert ff is not None and (ff.tensor, ff.op, ff.observed_as) == ("c1", "conv1", "c1@ReluTensor")
    # re-run on the target's own x, i.e. its first observation x@cast
    assert ff.local_error is not None and ff.local_error.ok is False
    assert ff.local_error.inputs == {"x": "target"}


def test_dump_reader_records_what_each_stage_stands_for(mnn_fixtures: Path, tmp_path: Path):
    from qnn_debug.mnn.dump_reader import import_mnn_dump

    run = import_mnn_dump(mnn_fixtures / "dumps" / "online_fp16", mnn_model=mnn_fixtures / "test.mnn", out=tmp_path / "r")
    eq = {t.name: (t.equivalent.kind, t.equivalent.of) for t in run.tensors if t.equivalent}
    assert eq == {"x@cast": ("cast", ["x", "x___tr4c1"]), "x___tr4c1": ("layout", ["x"]),
                  "c1@ReluTensor": ("pre_activation", ["r1"]), "y__before_tr": ("layout", ["y"]),
                  "y@cast": ("cast", ["y", "y__before_tr"]), "y": ("layout", ["y__before_tr"])}
    assert load_run(tmp_path / "r").info("x@cast").equivalent == run.info("x@cast").equivalent  # survives run.json


def _model(ops: list[tuple[str, str, list[int], list[int]]], names: list[str]) -> MnnModel:
    return MnnModel(path="m.mnn", tensor_names=names, inputs=[], output_names=[names[-1]],
                    ops=[MnnOp(position=i, name=n, type_id=0, type_name=t, inputs=a, outputs=b)
                         for i, (n, t, a, b) in enumerate(ops)])


def test_layout_chains_join_both_ways_and_only_known_stages_are_pre_activation():
    names = ["a", "a_nc4", "a_nc4_nchw", "conv", "conv_nchw"]
    model = _model([("a_nc4", "ConvertTensor", [0], [1]), ("a_nc4_nchw", "ConvertTensor", [1], [2]),
                    ("cv", "Convolution", [2], [3]), ("conv_nchw", "ConvertTensor", [3], [4]),
                    ("pool", "Pooling", [4], [0])], names)
    assert layout_class(model, 2) == [1, 0]  # nearest first, through the chain
    assert layout_class(model, 3) == [4]
    conv = model.ops[2]
    stage = of_stage(model, conv, "ReluTensor")
    assert stage is not None and stage.kind == "pre_activation" and stage.of == ["conv", "conv_nchw"]
    assert of_stage(model, conv, "InputReshapeTensor") is None  # not a pre-activation stage
    assert of_stage(model, model.ops[4], "ReluTensor") is None  # only convolutions fuse their activation


def test_alias_whose_shape_does_not_fit_is_listed_with_the_reason(tmp_path: Path):
    ref_w = RunWriter(tmp_path / "ref", RunRecord(role="reference", target="ort-cpu", precision="fp32"))
    ref_w.add_tensor("x", np.ones((1, 3, 4, 4), np.float32), kind="input")
    ref = ref_w.finish()
    tgt_w = RunWriter(tmp_path / "tgt", RunRecord(role="target", target="mnn-dump", precision="fp16"))
    tgt_w.add_tensor("x@cast", np.ones((1, 3, 4, 5), np.float16), kind="stage",
                     equivalent=Equivalence(kind="cast", of=["x"], note="x as the target held it (backend Cast stage)"))
    tgt_w.add_tensor("lonely", np.ones(3, np.float32), kind="stage",
                     equivalent=Equivalence(kind="layout", of=["nowhere"], note="the values of nowhere"))
    tgt = tgt_w.finish()
    result = align(ref, tgt)
    assert result.pairs == []
    reasons = {u.name: u.reason for u in result.unaligned}
    assert "stands for x" in reasons["x@cast"] and "does not fit [1, 3, 4, 4]" in reasons["x@cast"]
    assert "the reference records none of nowhere" in reasons["lonely"]
    assert reasons["x"] == "not in the target (graph input not recorded)"
