"""MNN QNN dumps where the numerics are hard: HTP's exponent-31 fp16 codes are no NaN/Inf (an L2-norm on raw pixels
is precision/fp16_range at the sum of squares, located through the .mnn), and a fused Deconvolution (ConvTranspose +
bias + BN + ReLU in one MNN op) whose ReLU is missing names the MNN op, its t<N> and the nodes it covers, with the
fused-activation pattern. Dumps are written by a test double of MNN's dumper from real simulator / ORT values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from doubles.htp_dump import write_htp_dump
from numerics_models import deconv_bn_relu_net, l2norm_net, pixels
from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.dump import run_dump
from qnn_debug.mnn.model_reader import read_mnn_model
from qnn_debug.onnx_graph import mark_all
from qnn_debug.runstore import load_run
from qnn_debug.targets import DumpRequest


def _mnn_model(base: Path) -> Path:
    return sorted((base / "mnn_cpu").glob("*.mnn"))[0]


@pytest.mark.parametrize(("variant", "conv", "size"), [("channel", True, 32), ("pow", False, 24)])
def test_htp_dump_with_exponent_31_codes_is_precision_fp16_range(tmp_path: Path, variant: str, conv: bool, size: int):
    onnx.save(l2norm_net(variant=variant, conv=conv, size=size), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=pixels(3, size))
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz")
    run_dump(DumpRequest(model=tmp_path / "m.onnx", out=tmp_path / "htp", inputs=tmp_path / "in.npz"))
    sim = load_run(tmp_path / "htp")  # the simulator's own values, written as MNN would dump them on the HTP
    write_htp_dump(tmp_path / "dump", _mnn_model(tmp_path / "base"), {t.name: sim.array(t.name) for t in sim.tensors})
    idx = read_mnn_model(_mnn_model(tmp_path / "base")).tensor_index("sumsq")
    codes = np.fromfile(next((tmp_path / "dump").glob(f"*_t{idx}.raw")), dtype=np.uint16)
    assert np.count_nonzero((codes & 0x7C00) == 0x7C00) > 0  # the dump really holds exponent-31 codes
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v = out["verdict"]
    assert (v["kind"], v["pattern"]) == ("precision", "fp16_range"), v["summary"]
    assert out["first_failing"]["tensor"] == "sumsq"
    assert v["evidence"]["fp16_range"]["target_nonfinite"] == 0 and v["evidence"]["fp16_range"]["rail"] == 131008.0
    assert not any(t["metrics"].get("inf") or t["metrics"].get("nan") for t in out["tensors"])


def _bug_values(model: onnx.ModelProto, x: np.ndarray, relu: str) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` with the ReLU ``relu`` dropped (what a Deconvolution that loses its fused ReLU gives)."""
    import onnxruntime as ort

    buggy = onnx.ModelProto()
    buggy.CopyFrom(model)
    for node in buggy.graph.node:
        if node.name == relu:
            node.op_type = "Identity"
    marked = mark_all(buggy)
    sess = ort.InferenceSession(marked.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {"x": x, **dict(zip(names, sess.run(names, {"x": x}), strict=True))}


# (cin, cout, size, kernel): two fused Deconvolutions of different shapes
DECONV_CASES = [(4, 8, 8, 2), (3, 6, 6, 3)]


@pytest.mark.parametrize(("cin", "cout", "size", "kernel"), DECONV_CASES)
def test_fused_deconvolution_missing_its_relu_names_the_mnn_op(tmp_path: Path, cin: int, cout: int, size: int,
                                                               kernel: int):
    model = deconv_bn_relu_net(cin=cin, cout=cout, size=size, kernel=kernel)
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = np.random.default_rng(1).standard_normal((1, cin, size, size)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz")
    mnn = _mnn_model(tmp_path / "base")
    write_htp_dump(tmp_path / "dump", mnn, _bug_values(model, x, "up_relu"))
    r = compare_paths(tmp_path / "base", tmp_path / "dump")
    v, ff = r.verdict, r.first_failing
    assert (v.kind, v.pattern) == ("real_bug", "fused_activation_dropped"), v.summary
    assert ff is not None and ff.tensor == "up_relu"
    assert (ff.op, ff.op_type) == ("up", "Deconvolution")
    assert ff.fused is not None and ff.fused.target_tensor is not None and ff.fused.target_tensor.startswith("t")
    assert ff.fused.model_nodes == ["up (ConvTranspose)", "up_bn (BatchNormalization)", "up_relu (Relu)"]
    assert "missing" in (v.evidence.get("pattern_variant") or "") and (v.evidence.get("pattern_sqnr_db") or 0) > 40
    assert "Deconvolution" in v.summary
    assert any(s.cli.startswith("qnn-debug op Deconvolution") and s.tool == "lookup_op_constraints"
               for s in r.next_steps)


def test_ieee_fp16_producer_is_read_as_inf_only_when_asked(tmp_path: Path):
    onnx.save(l2norm_net(variant="pow", size=16), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=pixels(3, 16))
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz")
    run_dump(DumpRequest(model=tmp_path / "m.onnx", out=tmp_path / "htp", inputs=tmp_path / "in.npz"))
    sim = load_run(tmp_path / "htp")
    values = {t.name: np.asarray(sim.array(t.name)) for t in sim.tensors}
    values["sumsq"] = np.full_like(values["sumsq"], np.inf)  # what an IEEE producer holds past 65504
    write_htp_dump(tmp_path / "dump", _mnn_model(tmp_path / "base"), values, codes="ieee")
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--fp16-codes", "ieee",
                                   "--json"])
    assert res.exit_code == 0, res.output
    v = json.loads(res.stdout)["verdict"]
    assert (v["kind"], v["pattern"]) == ("precision", "fp16_range"), v["summary"]
    assert v["evidence"]["fp16_range"]["target_nonfinite"] > 0 and "IEEE" in v["summary"]
    bad = CliRunner().invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--fp16-codes", "x",
                                   "--json"])
    assert bad.exit_code == 2 and "htp or ieee" in bad.stdout


_ROUND_TRIP = """
import json, sys, _tools
src, js, dst, index, name, scale = sys.argv[1:7]
assert _tools.mnnconvert(["mnnconvert", "-f", "MNN", "--modelFile", src, "--JsonFile", js])
net = json.load(open(js))
net["extraTensorDescribe"] = [{"index": int(index), "name": name, "quantInfo": {"scale": float(scale), "zero": 0.0,
                               "min": -128.0, "max": 127.0, "type": "DT_INT8"}}]
json.dump(net, open(js, "w"))
assert _tools.mnnconvert(["mnnconvert", "-f", "JSON", "--modelFile", js, "--MNNModel", dst, "--bizCode", "MNN"])
"""


def test_mnn_quant_attributes_make_an_npz_quantized_and_locate_the_clipping_encoding(tmp_path: Path):
    """A .mnn whose Deconvolution output carries an int8 quant attribute (MNN's JSON round trip writes it): an .npz
    of a run with that encoding is quantization at that tensor once the .mnn is given, fp16-judged without it."""
    import subprocess
    import sys

    model = deconv_bn_relu_net(cin=4, cout=8, size=8, kernel=2)
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz")
    mnn = _mnn_model(tmp_path / "base")
    idx = read_mnn_model(mnn).tensor_index("up_relu")
    ref = load_run(tmp_path / "base" / "reference")
    span = float(np.abs(ref.array("up_relu")).max())
    scale = span / 4 / 127  # the device encoding covers a quarter of the data's range
    subprocess.run([sys.executable, "-c", _ROUND_TRIP, str(mnn), str(tmp_path / "q.json"), str(tmp_path / "q.mnn"),
                    str(idx), "up_relu", repr(scale)], check=True, capture_output=True)
    assert read_mnn_model(tmp_path / "q.mnn").quant[idx].scale == pytest.approx(scale, rel=1e-6)
    values = {n: np.asarray(ref.array(n)) for n in ("x", "up", "up_bn")}
    values["up_relu"] = (np.clip(np.round(ref.array("up_relu") / scale), -128, 127) * scale).astype(np.float32)
    np.savez(tmp_path / "target.npz", **values)
    r = compare_paths(tmp_path / "base", tmp_path / "target.npz", mnn_model=tmp_path / "q.mnn")
    assert (r.verdict.kind, r.verdict.pattern) == ("quantization", "encoding_range"), r.verdict.summary
    assert r.first_failing is not None and r.first_failing.tensor == "up_relu"
    assert any(".mnn" in s for s in r.verdict.evidence["quantized_by"])
    ev = r.verdict.evidence["encoding_range"]
    assert ev["model_range"] is None or ev["model_range"][1] == pytest.approx(127 * scale, rel=1e-3)
    plain = compare_paths(tmp_path / "base", tmp_path / "target.npz")
    assert plain.verdict.kind != "quantization"


@pytest.mark.parametrize(("code", "dtype", "qmin", "qmax", "offset"), [(776, np.int8, -128, 127, 0),
                                                                       (1046, np.uint16, 0, 65535, -32768)])
def test_mnn_dump_with_a_narrow_fixed_point_encoding_is_quantization_with_the_manifest_encoding(
        tmp_path: Path, code: int, dtype: type, qmin: int, qmax: int, offset: int):
    """MNN maps quantized tensors to SFIXED_8 / UFIXED_16 with scale/offset in the manifest: an encoding covering a
    quarter of the data is located at that tensor with the manifest's own scale and offset."""
    from doubles.mnn_formats import nchw_to_qnn, write_dump

    model = deconv_bn_relu_net(cin=4, cout=8, size=8, kernel=2, seed=3)
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = np.random.default_rng(4).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    run_baseline(tmp_path / "m.onnx", tmp_path / "base", inputs=tmp_path / "in.npz")
    mnn = _mnn_model(tmp_path / "base")
    m = read_mnn_model(mnn)
    ref = load_run(tmp_path / "base" / "reference")
    r = np.asarray(ref.array("up_relu"), dtype=np.float64)
    scale = float(np.abs(r).max()) / 4 / (qmax + offset if offset else qmax)  # the range covers a quarter
    q = np.clip(np.round(r / scale) - offset, qmin, qmax).astype(dtype)
    idx = m.tensor_index("up_relu")
    write_dump(tmp_path / "dump", 0, [(f"t{idx}", nchw_to_qnn(q), code, 0, scale, offset)])
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v = out["verdict"]
    assert (v["kind"], v["pattern"]) == ("quantization", "encoding_range"), v["summary"]
    assert out["first_failing"]["tensor"] == "up_relu"
    ev = v["evidence"]["encoding_range"]
    assert ev["encoding_source"] == "target" and ev["device_offset"] == offset
    assert ev["device_scale"] == pytest.approx(scale, rel=1e-5)
    assert ev["reference_outside_share"] > 0.02
