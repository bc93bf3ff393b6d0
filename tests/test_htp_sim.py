"""The htp-sim target on Qualcomm's real HTP simulator: fp16 and QDQ (A8W8, A16W8), assignment, observer effect,
unsupported ops failing instead of falling back, and the run layout other modules rely on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_debug.baseline import Baseline, load_baseline, run_baseline
from qnn_debug.dump import DumpResult, run_dump
from qnn_debug.errors import BadInputError, UnsupportedOnTargetError
from qnn_debug.examples import deep_conv_net, quantize_for_qnn, single_op_model, small_cnn
from qnn_debug.onnx_graph import nodes_in_order
from qnn_debug.runstore import Run, load_run
from qnn_debug.targets import DumpRequest
from qnn_debug.workers.htp_worker import IDENTICAL_DB


def sqnr(test: np.ndarray, ref: np.ndarray) -> float:
    r = np.asarray(ref, np.float64)
    d = np.asarray(test, np.float64) - r
    return float(10 * np.log10((r * r).sum() / max((d * d).sum(), 1e-300)))


def rel(test: np.ndarray, ref: np.ndarray) -> float:
    r = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(test, np.float64) - r).max() / np.abs(r).max())


def _baseline_and_dump(model: Path, out: Path, *, precision: str = "fp16", shapes: dict[str, list[int]] | None = None,
                       gate: bool = False) -> tuple[Baseline, Run, DumpResult]:
    base = run_baseline(model, out / "base", shapes=shapes, mnn_gate=gate)
    result = run_dump(DumpRequest(model=model, out=out / "htp", precision=precision,  # type: ignore[arg-type]
                                  inputs=Path(base.inputs_path)))
    return load_baseline(base.out), load_run(result.out), result


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Baseline, Run, DumpResult]:
    tmp = tmp_path_factory.mktemp("htp_small")
    model = tmp / "deep.onnx"
    onnx.save(deep_conv_net(blocks=8), str(model))
    return (model, *_baseline_and_dump(model, tmp))


@pytest.fixture(scope="module")
def ppocr_cls_runs(ppocr_cls: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Baseline, Run, DumpResult]:
    return _baseline_and_dump(ppocr_cls, tmp_path_factory.mktemp("htp_cls"), shapes={"x": [1, 3, 48, 192]})


@pytest.fixture(scope="module")
def ppocr_det_runs(ppocr_det: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Baseline, Run, DumpResult]:
    return _baseline_and_dump(ppocr_det, tmp_path_factory.mktemp("htp_det"), shapes={"x": [1, 3, 64, 64]})


def test_run_layout_matches_the_reference(small: tuple[Path, Baseline, Run, DumpResult]) -> None:
    model_path, base, run, result = small
    rec = run.record
    assert (rec.role, rec.target, rec.precision, rec.soc_model, rec.htp_arch) == ("target", "htp-sim", "fp16", 69, 79)
    assert rec.inputs is not None and rec.inputs.sha256 == base.report.inputs.sha256
    assert rec.inputs.source == "npz:inputs.npz" and rec.finished_at is not None
    assert rec.versions["onnxruntime-qnn"] != "not installed"
    # the same names, provenance and order as the ORT reference
    assert [t.name for t in run.iter_in_order()] == [t.name for t in base.reference.iter_in_order()]
    nodes = {o: n for n in nodes_in_order(onnx.load(str(model_path))) for o in n.outputs}
    for t in run.tensors:
        if t.kind == "input":
            assert (t.position, t.op) == (-1, None) and np.array_equal(run.array(t.name), base.reference.array(t.name))
        else:
            assert (t.op, t.op_type, t.position) == (nodes[t.name].name, nodes[t.name].op_type, nodes[t.name].position)
    assert run.info("prob").kind == "output" and rec.outputs == ["prob"]
    assert result.tensors == len(rec.tensors) == 36 and result.quantized_tensors == 0


def test_everything_ran_on_qnn(small: tuple[Path, Baseline, Run, DumpResult]) -> None:
    rec = small[2].record
    assert rec.assignment and {a["provider"] for a in rec.assignment} == {"QNNExecutionProvider"}
    # the summary counts the model's own graph on QNN, not the capture nodes added for the dump
    assert 0 < small[3].qnn_nodes == rec.extra["qnn_nodes"]["unmarked"] < rec.extra["qnn_nodes"]["marked"]
    assert rec.extra["provider_options"]["soc_model"] == "69"
    logs = {p.name for p in (small[2].dir / "logs").iterdir()}
    assert {"htp_worker.log", "qnn_marked.log", "qnn_unmarked.log"} <= logs


def test_fp16_numerics_track_the_floor(small: tuple[Path, Baseline, Run, DumpResult]) -> None:
    _, base, run, _ = small
    assert base.floor is not None
    ratios = []
    for t in base.reference.tensors:
        if t.kind == "input" or t.name == "prob":
            continue
        ref = base.reference.array(t.name)
        htp, floor = rel(run.array(t.name), ref), rel(base.floor.array(t.name), ref)
        assert 1e-5 < htp < 1e-2, (t.name, htp)  # really fp16, not a CPU result (which would be ~1e-7)
        ratios.append(htp / floor)
    assert 0.3 < float(np.median(ratios)) < 3  # measured: HTP error ~ the floor's, layer by layer


def test_observer_effect_recorded(small: tuple[Path, Baseline, Run, DumpResult]) -> None:
    run = small[2]
    (db,) = run.record.observer_effect_db.values()  # type: ignore[union-attr]
    assert 40 < db <= IDENTICAL_DB  # measured 71 dB on this net
    unmarked = np.load(run.dir / run.record.extra["unmarked_outputs_file"])
    effect = run.record.extra["observer_effect"]["prob"]
    assert effect["identical"] == (db == IDENTICAL_DB)
    assert effect["max_abs"] == pytest.approx(float(np.abs(unmarked["prob"] - run.array("prob")).max()), abs=1e-9)


def test_ppocr_cls_on_htp(ppocr_cls_runs: tuple[Baseline, Run, DumpResult]) -> None:
    base, run, result = ppocr_cls_runs
    assert result.qnn_nodes and result.tensors == len(base.reference.tensors) > 200
    out = run.record.outputs[0]
    assert base.floor is not None
    # measured: HTP 56 dB, floor 69 dB, marked vs unmarked 51.6 dB on this seed
    assert 40 < sqnr(run.array(out), base.reference.array(out)) < 90
    assert run.record.observer_effect_db is not None and run.record.observer_effect_db[out] > 30


def test_ppocr_det_on_htp(ppocr_det_runs: tuple[Baseline, Run, DumpResult]) -> None:
    base, run, _ = ppocr_det_runs
    out = run.record.outputs[0]
    ref = np.asarray(base.reference.array(out))
    assert (ref > 0.3).mean() > 0.05  # the text page gives the detector something to find
    assert 30 < sqnr(run.array(out), ref) < 80  # measured 42.9 dB at 96x96
    assert {a["provider"] for a in run.record.assignment} == {"QNNExecutionProvider"}


def _qdq(tmp: Path, activation: str) -> Path:
    onnx.save(deep_conv_net(blocks=4, channels=16, size=16), str(tmp / "f.onnx"))
    bits = "uint16" if activation == "a16w8" else "uint8"
    return Path(quantize_for_qnn(str(tmp / "f.onnx"), str(tmp / f"{activation}.onnx"), activation=bits))


@pytest.mark.parametrize(("activation", "raw_dtype", "min_db"), [("a8w8", "uint8", 30.0), ("a16w8", "uint16", 40.0)])
def test_qdq_model_on_htp(tmp_path: Path, activation: str, raw_dtype: str, min_db: float) -> None:
    model = _qdq(tmp_path, activation)
    base, run, result = _baseline_and_dump(model, tmp_path, precision="quantized")
    assert run.record.precision == "quantized" and base.reference.record.precision == "fp32-fakequant"
    assert {a["provider"] for a in run.record.assignment} == {"QNNExecutionProvider"}
    quantized = [t for t in run.tensors if t.quant is not None]
    assert result.quantized_tensors == len(quantized) >= 10
    for t in quantized:
        assert t.quant is not None and t.quant.raw_dtype == raw_dtype and t.source_dtype == raw_dtype
        assert t.target_name and t.target_name != t.name and base.reference.has(t.name)
        raw = np.asarray(run.raw(t.name))
        assert np.allclose(run.array(t.name), (raw.astype(np.int64) + np.asarray(t.quant.offset)) * t.quant.scale)
        ref_q = base.reference.info(t.name).quant
        assert ref_q is not None and ref_q.scale == t.quant.scale and ref_q.offset == t.quant.offset
        # HTP's integers against the fake-quant reference's (measured 37-64 dB for A8W8, 47-64 for A16W8)
        assert sqnr(run.array(t.name), base.reference.array(t.name)) > min_db, t.name
    assert run.record.observer_effect_db is not None


def test_unsupported_op_fails_instead_of_falling_back(tmp_path: Path) -> None:
    # Acos: the QNN EP has no Acos and the simulator run has no lowering for it (Erf, the example before, is lowered)
    with pytest.raises(UnsupportedOnTargetError) as e:
        onnx.save(single_op_model("Acos", [1, 8], name="acos"), str(tmp_path / "acos.onnx"))
        run_dump(DumpRequest(model=tmp_path / "acos.onnx", out=tmp_path / "htp"))
    err = e.value
    assert err.exit_code == 3 and "\n" not in err.message and "acos (Acos)" in err.message
    assert err.details["nodes"] == [{"name": "acos", "op_type": "Acos"}] and err.details["reasons"]
    assert not (tmp_path / "htp" / "run.json").exists()
    assert (tmp_path / "htp" / "logs" / "htp_worker.log").exists()  # kept for triage


def _slice_by_graph_input(tmp_path: Path, *, decoder: bool) -> Path:
    """x[:, start:start+4] with ``start`` a graph input (as llmexport's logits_index picks the last token), then a
    Relu; node names carry /layers.0/ for the decoder-shaped variant."""
    from onnx import TensorProto, helper

    prefix = "/layers.0" if decoder else "/head"
    nodes = [helper.make_node("Add", ["start", "four"], ["end"], name=f"{prefix}/End"),
             helper.make_node("Slice", ["x", "start", "end", "axes"], ["s"], name=f"{prefix}/Slice"),
             helper.make_node("Relu", ["s"], ["y"], name=f"{prefix}/Relu")]
    graph = helper.make_graph(
        nodes, "slice_by_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("start", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("four", TensorProto.INT64, [1], [4]),
                     helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    path = tmp_path / ("decoder.onnx" if decoder else "head.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("decoder", [True, False])
def test_a_slice_fed_by_a_graph_input_names_that_input_and_how_to_narrow(tmp_path: Path, decoder: bool) -> None:
    from qnn_debug.targets.qnn_ep import create_session, provider_options

    model = _slice_by_graph_input(tmp_path, decoder=decoder)
    with pytest.raises(UnsupportedOnTargetError) as e:
        create_session(str(model), provider_options(69, None))
    err = e.value
    fed = err.details["runtime_fed_inputs"]
    assert fed and fed[0]["slot"] == "starts" and fed[0]["graph_inputs"] == ["start"], err.details
    assert "takes its starts from graph input(s) start at run time" in (err.hint or "")
    step = "qnn-debug localise-blocks" if decoder else "qnn-debug bisect"
    assert f"`{step} {model}" in (err.hint or ""), err.hint


def test_bad_requests_are_refused_before_running(tmp_path: Path) -> None:
    model = tmp_path / "small.onnx"
    onnx.save(small_cnn(), str(model))
    cases = [
        (DumpRequest(model=model, out=tmp_path / "a", precision="quantized"), "no QuantizeLinear"),
        (DumpRequest(model=model, out=tmp_path / "b", soc_model=30), "fp32 numerics"),
        (DumpRequest(model=model, out=tmp_path / "c", precision="fp32"), "runs fp16"),
        (DumpRequest(model=model, out=tmp_path / "d", soc_model=12345), "unknown soc_model"),
        (DumpRequest(model=model, out=tmp_path / "e", options={"bogus": "1"}), "does not take the option"),
        (DumpRequest(model=tmp_path / "m.mnn", out=tmp_path / "f"), "runs ONNX models"),
        (DumpRequest(model=model, out=tmp_path / "g", target="tpu"), "unknown target"),
        (DumpRequest(model=model, out=tmp_path / "h", shapes={"y": [1]}), "does not have: y"),
        (DumpRequest(model=model, out=tmp_path / "i", options={"capture_dtype": "int8"}), "capture_dtype must be"),
        (DumpRequest(model=model, out=tmp_path / "j", precision="fp32", soc_model=30,
                     options={"capture_dtype": "float16"}), "round a fp32 run"),
    ]
    for request, match in cases:
        with pytest.raises(BadInputError, match=match):
            run_dump(request)
    assert not any((tmp_path / n / "run.json").exists() for n in "abcdefghij")


def test_existing_output_needs_force(small: tuple[Path, Baseline, Run, DumpResult], tmp_path: Path) -> None:
    model = small[0]
    out = tmp_path / "o"
    out.mkdir()
    (out / "mine.txt").write_text("x")
    with pytest.raises(BadInputError, match="not empty"):
        run_dump(DumpRequest(model=model, out=out))
    with pytest.raises(BadInputError, match="does not look like"):
        run_dump(DumpRequest(model=model, out=out, force=True))
    assert (out / "mine.txt").exists()


def test_disabled_optimizers_are_recorded(small: tuple[Path, Baseline, Run, DumpResult], tmp_path: Path) -> None:
    model, base = small[0], small[1]
    result = run_dump(DumpRequest(model=model, out=tmp_path / "nofuse", inputs=base.inputs_path,
                                  options={"disabled_optimizers": "ConvBNFusion"}))
    run = load_run(result.out)
    assert run.record.extra["disabled_optimizers"] == ["ConvBNFusion"]
    # without Conv+BN folding the QNN graph has more nodes, numerics stay at fp16 level
    assert run.record.extra["qnn_nodes"]["unmarked"] > small[2].record.extra["qnn_nodes"]["unmarked"]
    assert sqnr(run.array("prob"), base.reference.array("prob")) > 40


def _within_one_fp16_ulp(test: np.ndarray, ref: np.ndarray) -> bool:
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    return bool(np.all(np.abs(test.astype(np.float64) - ref) <= ulp))


def test_float16_views_store_nchw_float32_like_the_float32_capture(small: tuple[Path, Baseline, Run, DumpResult],
                                                                   tmp_path: Path) -> None:
    """fp16 runs export float16 views (2-3x faster marked run); what is stored means the same as marking the
    float32 tensors: same names, provenance, NCHW shapes and float32 files, values within one fp16 ulp
    (the float32 export is the fp16 value plus one float32 ulp), the same observer effect."""
    model, base, run, _ = small
    old = load_run(run_dump(DumpRequest(model=model, out=tmp_path / "f32", inputs=base.inputs_path,
                                        options={"capture_dtype": "float32"})).out)
    activations = [t for t in run.tensors if t.kind == "activation"]
    assert run.record.extra["capture"] == {"dtype": "float16", "float16_views": len(activations),
                                           "refetched_as_float32": []}
    assert old.record.extra["capture"] == {"dtype": "float32", "float16_views": 0, "refetched_as_float32": []}
    assert [t.name for t in run.iter_in_order()] == [t.name for t in old.iter_in_order()]
    for t in run.tensors:
        o = old.info(t.name)
        assert (t.op, t.op_type, t.position, t.kind, t.shape, t.dtype) == (o.op, o.op_type, o.position, o.kind, o.shape,
                                                                           "float32")
        a, b = np.asarray(run.array(t.name)), np.asarray(old.array(t.name))
        assert a.shape == tuple(base.reference.info(t.name).shape)  # the model's NCHW layout
        if t.kind == "activation":
            assert t.source_dtype == "float16" and t.layout_note and o.source_dtype == "float32"
            assert np.array_equal(a, a.astype(np.float16).astype(np.float32)), t.name  # really fp16 values
            assert _within_one_fp16_ulp(a, b), t.name
        else:
            assert t.source_dtype == "float32" and np.array_equal(a, b), t.name
    assert run.record.observer_effect_db == old.record.observer_effect_db


def test_views_beyond_the_fp16_range_are_fetched_as_float32(tmp_path: Path) -> None:
    """The HTP Cast turns values beyond ±65504 into NaN (measured), so such views are re-fetched as float32:
    the stored tensor is the float32 capture's value, never a NaN the simulator did not compute."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(1000, np.float32), "k"),
             numpy_helper.from_array(np.array(0.001, np.float32), "q")]
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Mul", ["r", "k"], ["big"], name="up"),
             helper.make_node("Mul", ["big", "q"], ["y"], name="down")]
    graph = helper.make_graph(nodes, "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=np.array([1, 30, 60, 65, 66, 100, 131, 200, 300, 1000, -3, -70],
                                             np.float32).reshape(1, 2, 2, 3))
    runs = {dtype: load_run(run_dump(DumpRequest(model=tmp_path / "m.onnx", out=tmp_path / dtype, inputs=tmp_path / "in.npz",
                                                 options={"capture_dtype": dtype})).out)
            for dtype in ("float16", "float32")}
    new, old = runs["float16"], runs["float32"]
    assert new.record.extra["capture"] == {"dtype": "float16", "float16_views": 1, "refetched_as_float32": ["big"]}
    assert new.info("r").source_dtype == "float16" and new.info("big").source_dtype == "float32"
    big = np.asarray(new.array("big"))
    assert np.isfinite(big).all() and big.max() > 65504 and np.array_equal(big, old.array("big"))
    assert np.array_equal(new.array("y"), old.array("y"))
