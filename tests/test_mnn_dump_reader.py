"""MNN QNN dump reader: the real simulator dumps parse exactly; dtypes, quantization, staleness, hostile names."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from doubles.mnn_formats import build_plugin_model, nchw_to_qnn, write_dump
from qnn_debug.errors import BadInputError
from qnn_debug.mnn.dump_reader import import_mnn_dump, scan_dump_dir
from qnn_debug.runstore import load_run

FP16_REL = 2e-3  # fp16 storage and arithmetic across two convolutions, relative to max |reference|


@pytest.fixture(scope="module")
def reference(mnn_fixtures: Path) -> dict[str, np.ndarray]:
    """fp32 reference of the fixture model: ONNX Runtime CPU on testdir/test.onnx with testdir/x.txt."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(mnn_fixtures / "testdir" / "test.onnx")
    for name in ("c1", "r1", "c2"):
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x}), strict=True))
    outs["x"] = x
    return outs


# name in our run → (QNN name, kind, op, op type, QNN dtype, reference tensor)
EXPECTED_FP16 = {
    "x@cast": ("t0_cast", "stage", None, None, "float16", "x"),
    "x___tr4c1": ("t1", "activation", "x___tr4c1", "ConvertTensor", "float16", "x"),
    "c1@ReluTensor": ("c1_ReluTensor", "stage", "c1", "Convolution", "float16", "c1"),
    "r1": ("t2", "activation", "c1", "Convolution", "float16", "r1"),
    "c2": ("t3", "activation", "c2", "Convolution", "float16", "c2"),
    "y__before_tr": ("t4", "activation", "y", "Pooling3D", "float16", "y"),
    "y@cast": ("t5_cast", "stage", "y__before_tr", "ConvertTensor", "float16", "y"),
    "y": ("t5", "output", "y__before_tr", "ConvertTensor", "float32", "y"),
}


@pytest.mark.parametrize("dump", ["online_fp16", "offline_fp16", "online_fp32"])
def test_real_fixture_dumps_parse_exactly(dump: str, mnn_fixtures: Path, reference: dict[str, np.ndarray],
                                          tmp_path: Path) -> None:
    run = import_mnn_dump(mnn_fixtures / "dumps" / dump, mnn_model=mnn_fixtures / "test.mnn", out=tmp_path / "run")
    fp32 = dump == "online_fp32"
    expected = {k: v for k, v in EXPECTED_FP16.items() if not (fp32 and "@" in k and k != "c1@ReluTensor")}
    assert set(run.names()) == set(expected)
    assert run.record.warnings == []
    assert run.record.precision == ("fp32" if fp32 else "fp16")
    assert run.record.outputs == ["y"]
    assert run.record.model is not None and run.record.model.format == "mnn"
    for name, (qnn, kind, op, op_type, dtype, ref_name) in expected.items():
        t = run.info(name)
        assert (t.target_name, t.kind, t.op, t.op_type) == (qnn, kind, op, op_type), name
        assert t.source_dtype == ("float32" if fp32 else dtype), name
        ref = reference[ref_name]
        got = run.array(name)
        assert got.shape == ref.shape, name  # NHWC feature maps restored to NCHW
        rel = float(np.abs(got - ref).max() / np.abs(ref).max())
        assert rel < (1e-5 if fp32 else FP16_REL), (name, rel)
    # ModuleBasic's own log for these runs says diffmax = 0.007055 for y at fp16
    y_err = float(np.abs(run.array("y") - reference["y"]).max())
    assert y_err == pytest.approx(0.007055 if not fp32 else 0.0, abs=2e-6)
    # execution order from the .mnn oplist, stages next to their tensors
    order = [t.name for t in run.iter_in_order()]
    assert order.index("c1@ReluTensor") < order.index("r1") < order.index("c2") < order.index("y")


def test_without_model_names_stay_qnn(mnn_fixtures: Path, tmp_path: Path) -> None:
    run = import_mnn_dump(mnn_fixtures / "dumps" / "online_fp16", out=tmp_path / "run")
    assert "t3" in run.names() and run.array("t3").shape == (1, 32, 32, 16)
    assert any("no .mnn" in w for w in run.record.warnings)


def test_plugin_wrapper_model_is_refused(mnn_fixtures: Path, tmp_path: Path) -> None:
    wrapper = build_plugin_model(tmp_path / "test_69_79.mnn", inputs={"x": [1, 3, 32, 32]}, outputs=["y"],
                                 source_indexes={"x": 0, "y": 5}, binary="test_69_79.bin", graph="test_0", dump=True)
    with pytest.raises(BadInputError, match="MNN2QNNModel wrapper") as e:
        import_mnn_dump(mnn_fixtures / "dumps" / "offline_fp16", mnn_model=wrapper, out=tmp_path / "run")
    assert e.value.hint and "source .mnn" in e.value.hint


ALL_CODES = {  # every host-mappable QNN dtype code → numpy dtype
    8: "int8", 22: "int16", 50: "int32", 100: "int64", 264: "uint8", 278: "uint16", 306: "uint32", 356: "uint64",
    534: "float16", 562: "float32", 612: "float64", 776: "int8", 790: "int16", 818: "int32", 1032: "uint8",
    1046: "uint16", 1074: "uint32", 1288: "bool",
}


def test_every_dtype_code(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for code, dt in ALL_CODES.items():
        arr = rng.integers(0, 2, (2, 3)).astype(dt) if dt == "bool" else (rng.random((2, 3)) * 100).astype(dt)
        rows.append((f"n{code}", arr, code))
    rows.append(("scalar", np.array(3.5, dtype=np.float32), 562))
    write_dump(tmp_path / "d", 0, rows)
    run = import_mnn_dump(tmp_path / "d", out=tmp_path / "run")
    for name, arr, code in rows:
        t = run.info(name)
        got = run.array(name)
        assert got.shape == arr.shape
        assert t.source_dtype == ALL_CODES.get(code, "float32")
        np.testing.assert_array_equal(got.astype(np.float64), arr.astype(np.float64))
        if code in (534, 562):
            assert got.dtype == np.float32


def test_scale_offset_dequantizes_with_qnn_sign(tmp_path: Path) -> None:
    q16 = np.array([[0, 1000, 40000, 65535]], dtype=np.uint16)
    q8 = np.array([[-128, -1, 0, 127]], dtype=np.int8)
    write_dump(tmp_path / "d", 0, [("a16", q16, 1046, 0, 0.0025, -32768), ("a8", q8, 776, 0, 0.5, 0)])
    run = import_mnn_dump(tmp_path / "d", out=tmp_path / "run")
    np.testing.assert_allclose(run.array("a16"), (q16.astype(np.float64) - 32768) * 0.0025, rtol=1e-6)
    np.testing.assert_allclose(run.array("a8"), q8 * 0.5)
    t = run.info("a16")
    assert t.quant is not None and t.quant.offset == -32768 and t.quant.zero_point == 32768
    raw = run.raw("a16")
    assert raw is not None and raw.dtype == np.uint16
    np.testing.assert_array_equal(raw, q16)
    assert run.record.precision == "quantized"


def test_per_axis_quant_without_params_keeps_integers(tmp_path: Path) -> None:
    q = np.arange(6, dtype=np.uint8).reshape(2, 3)
    write_dump(tmp_path / "d", 0, [("w", q, 1032, 1, 0.0, 0)])
    run = import_mnn_dump(tmp_path / "d", out=tmp_path / "run")
    assert run.info("w").quant is None and "not dequantized" in (run.info("w").label or "")
    np.testing.assert_array_equal(run.array("w"), q)


def test_quantized_nc4hw4_activation_restored_with_raw(mnn_fixtures: Path, tmp_path: Path) -> None:
    """A UFIXED_16 feature map (t3 = c2, NHWC in QNN) comes back NCHW, raw integers transposed alike."""
    q = np.arange(1 * 16 * 32 * 32, dtype=np.uint16).reshape(1, 16, 32, 32) % 65535
    cube = np.arange(64, dtype=np.uint16).reshape(1, 4, 4, 4)  # C == H == W: same shape either way
    write_dump(tmp_path / "d", 0, [("t3", nchw_to_qnn(q), 1046, 0, 0.001, -100), ("t2", nchw_to_qnn(cube), 1046, 0, 1.0, 0)])
    run = import_mnn_dump(tmp_path / "d", mnn_model=mnn_fixtures / "test.mnn", out=tmp_path / "run")
    raw = run.raw("c2")
    assert raw is not None
    np.testing.assert_array_equal(raw, q)
    np.testing.assert_allclose(run.array("c2"), (q.astype(np.float64) - 100) * 0.001, rtol=1e-6)
    np.testing.assert_array_equal(run.raw("r1"), cube)
    np.testing.assert_array_equal(run.array("r1"), cube.astype(np.float32))


def test_shapes_hint_decides_layout(mnn_fixtures: Path, tmp_path: Path) -> None:
    a = np.arange(2 * 4 * 4 * 4, dtype=np.float32).reshape(2, 4, 4, 4)  # C == H == W: ambiguous by shape
    write_dump(tmp_path / "d", 0, [("t3", a, 562), ("t2", a, 562)])
    run = import_mnn_dump(tmp_path / "d", mnn_model=mnn_fixtures / "test.mnn", out=tmp_path / "run",
                          shapes={"c2": [2, 4, 4, 4], "r1": [2, 9, 9, 9]})
    np.testing.assert_array_equal(run.array("c2"), np.transpose(a, (0, 3, 1, 2)))  # NC4HW4 decides
    assert "ambiguous" in (run.info("c2").layout_note or "")
    assert any("match neither" in w for w in run.record.warnings)


def _touch(path: Path, t: float) -> None:
    os.utime(path, (t, t))


def test_several_executions_default_newest_and_explicit(tmp_path: Path) -> None:
    d = tmp_path / "d"
    for e in range(3):
        write_dump(d, e, [("t1", np.full((2, 2), e, np.float32), 562)])
        _touch(d / f"manifest_{e:06d}.tsv", 1_000_000 + e)
    scan = scan_dump_dir(d)
    assert [x.number for x in scan.executions] == [0, 1, 2] and not any(x.stale for x in scan.executions)
    assert float(import_mnn_dump(d, out=tmp_path / "r").array("t1")[0, 0]) == 2.0
    assert float(import_mnn_dump(d, execution=0, out=tmp_path / "r0").array("t1")[0, 0]) == 0.0
    with pytest.raises(BadInputError, match="no execution 7") as e:
        import_mnn_dump(d, execution=7, out=tmp_path / "r7")
    assert e.value.hint and "0, 1, 2" in e.value.hint


def test_stale_files_from_an_older_longer_run_are_reported(tmp_path: Path) -> None:
    d = tmp_path / "d"
    # older run: 3 executions with an extra tensor
    for e in range(3):
        write_dump(d, e, [("t1", np.zeros(4, np.float32), 562), ("t9", np.zeros(4, np.float32), 562)])
        _touch(d / f"manifest_{e:06d}.tsv", 1_000_000 + e)
    # newer run: 1 execution, one tensor (overwrites manifest_000000 and its first raw file only)
    write_dump(d, 0, [("t1", np.ones(4, np.float32), 562)])
    _touch(d / "manifest_000000.tsv", 2_000_000)
    scan = scan_dump_dir(d)
    assert [x.stale for x in scan.executions] == [False, True, True]
    assert "execution_000000_tensor_0001_t9.raw" in scan.unlisted_files
    run = import_mnn_dump(d, out=tmp_path / "run")
    assert run.record.extra["execution"] == 0 and run.names() == ["t1"]
    assert float(run.array("t1")[0]) == 1.0
    text = " ".join(run.record.warnings)
    assert "manifest_000001.tsv" in text and "older run" in text and "tensor_0001_t9" in text
    # picking a stale execution explicitly works but says so
    old = import_mnn_dump(d, execution=2, out=tmp_path / "old")
    assert any("left over from an older run" in w for w in old.record.warnings)


def test_copy_without_timestamps_is_not_called_stale(tmp_path: Path) -> None:
    d = tmp_path / "d"
    for e in range(3):
        write_dump(d, e, [("t1", np.full(2, e, np.float32), 562)])
        _touch(d / f"manifest_{e:06d}.tsv", 1_000_000 - 0.2 * e)  # copied in reverse order, moments apart
    scan = scan_dump_dir(d)
    assert not any(x.stale for x in scan.executions) and scan.problems == []
    assert scan.execution().number == 2


HOSTILE = ["a;rm -rf ~", "$(touch pwned)", "q'uote\"d", "with space", "../../escape", "tab\there", "`id`"]


def test_hostile_names_stay_inside_the_run(tmp_path: Path) -> None:
    d = tmp_path / "d"
    rows = [(n, np.full(3, i, np.float32), 562) for i, n in enumerate(HOSTILE)]
    write_dump(d, 0, rows)
    out = tmp_path / "run"
    run = import_mnn_dump(d, out=out)
    assert set(run.names()) == set(HOSTILE)
    for i, n in enumerate(HOSTILE):
        assert float(run.array(n)[0]) == i
        assert (out / run.info(n).file).resolve().parent == (out / "tensors").resolve()
    assert not (tmp_path / "pwned").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]


def test_manifest_file_column_cannot_escape(tmp_path: Path) -> None:
    secret = tmp_path / "secret.raw"
    secret.write_bytes(np.ones(4, np.float32).tobytes())
    d = tmp_path / "d"
    d.mkdir()
    (d / "manifest_000000.tsv").write_text(
        "index\tname\tfile\tdata_type\tdimensions\tquant_encoding\tscale\toffset\n"
        "0\tt1\t../secret.raw\t562\t4\t2147483647\t0\t0\n", encoding="utf-8")
    with pytest.raises(BadInputError, match="unsafe file"):
        import_mnn_dump(d, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_damaged_dumps_are_refused_naming_file_and_row(tmp_path: Path) -> None:
    """A damaged dump never becomes a run (so never a verdict): one typed error lists every bad row."""
    d = tmp_path / "d"
    write_dump(d, 0, [("good", np.ones(4, np.float32), 562), ("cut", np.ones(8, np.float32), 562),
                      ("gone", np.ones(2, np.float32), 562), ("s4", np.zeros(2, np.int8), 772)])
    cut = d / "execution_000000_tensor_0001_cut.raw"
    cut.write_bytes(cut.read_bytes()[:10])
    (d / "execution_000000_tensor_0002_gone.raw").unlink()
    with (d / "manifest_000000.tsv").open("a", encoding="utf-8") as f:
        f.write("not\ta\trow\n")
    with pytest.raises(BadInputError) as caught:
        import_mnn_dump(d, out=tmp_path / "run")
    text = caught.value.message
    assert not (tmp_path / "run").exists() and (d / "execution_000000_tensor_0000_good.raw").is_file()
    assert "row 3 ('cut'" in text and "10 bytes, expected 32" in text
    assert "gone" in text and "missing" in text
    assert "SFIXED_POINT_4" in text and "malformed row" in text


@pytest.mark.parametrize("setup", ["missing", "empty", "header"])
def test_not_a_dump_dir(tmp_path: Path, setup: str) -> None:
    d = tmp_path / "d"
    if setup != "missing":
        d.mkdir()
    if setup == "header":
        (d / "manifest_000000.tsv").write_text("name,file\n", encoding="utf-8")
    with pytest.raises(BadInputError):
        import_mnn_dump(d, out=tmp_path / "run")
    assert not (tmp_path / "run" / "run.json").exists()


def test_parent_of_dump_dir_is_accepted(mnn_fixtures: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(mnn_fixtures / "dumps" / "online_fp32", tmp_path / "work" / "qnn_intermediate_outputs")
    run = import_mnn_dump(tmp_path / "work", mnn_model=mnn_fixtures / "test.mnn", out=tmp_path / "run")
    assert "c2" in run.names()
    loaded = load_run(tmp_path / "run")
    assert loaded.record.extra["manifest"] == "manifest_000000.tsv"


@pytest.mark.parametrize("old_rows,new_rows,old_execs,stamp", [(2, 1, 3, "same"), (5, 3, 2, "reversed"),
                                                                (6, 2, 4, "same"), (3, 2, 3, "reversed")])
def test_stale_executions_found_by_content_when_mtimes_say_nothing(tmp_path: Path, old_rows: int, new_rows: int,
                                                                   old_execs: int, stamp: str) -> None:
    """An earlier, longer run copied without timestamps: its leftover execution-0 files, listed again by its later
    manifests, mark those manifests stale; the leftovers become explicit unaligned rows with a reason, never read."""
    d = tmp_path / "d"
    rng = np.random.default_rng(old_rows * 10 + new_rows)
    for e in range(old_execs):
        write_dump(d, e, [(f"t{i}", np.full(3 + i, 100.0 + e, np.float32), 562) for i in range(old_rows)])
    new = [rng.standard_normal(3 + i).astype(np.float32) for i in range(new_rows)]
    write_dump(d, 0, [(f"t{i}", a, 562) for i, a in enumerate(new)])
    for e in range(old_execs):  # mtimes carry no order: all equal, or reversed
        _touch(d / f"manifest_{e:06d}.tsv", 1_000_000 + (0 if stamp == "same" else -0.1 * e))
    scan = scan_dump_dir(d)
    assert [x.stale for x in scan.executions] == [False] + [True] * (old_execs - 1)
    run = import_mnn_dump(d, out=tmp_path / "run")
    assert run.record.extra["execution"] == 0 and run.names() == [f"t{i}" for i in range(new_rows)]
    np.testing.assert_array_equal(run.array(f"t{new_rows - 1}").ravel(), new[-1])
    unaligned = run.record.extra["unaligned"]
    assert sorted(u["file"] for u in unaligned) == sorted(
        f"execution_000000_tensor_{i:04d}_t{i}.raw" for i in range(new_rows, old_rows))
    assert all("not listed in manifest_000000.tsv" in u["reason"] for u in unaligned)
    text = " ".join(run.record.warnings)
    assert "earlier, longer run" in text and "manifest_000001.tsv" in text


@pytest.mark.parametrize("case", ["other execution", "other tensor"])
def test_rows_whose_files_carry_other_numbers_are_refused(tmp_path: Path, case: str) -> None:
    d = tmp_path / "d"
    write_dump(d, 1, [("a", np.ones(4, np.float32), 562), ("b", np.ones(4, np.float32), 562)])
    manifest = write_dump(d, 0, [("a", np.ones(4, np.float32), 562), ("b", np.ones(4, np.float32), 562)])
    text = manifest.read_text(encoding="utf-8")
    if case == "other execution":
        text = text.replace("execution_000000_tensor_0001_b.raw", "execution_000001_tensor_0001_b.raw")
        expected = "names a file of execution 1, not 0"
    else:
        text = text.replace("execution_000000_tensor_0001_b.raw", "execution_000000_tensor_0000_a.raw")
        expected = "file of tensor 0 in row index 1"
    manifest.write_text(text, encoding="utf-8")
    with pytest.raises(BadInputError) as caught:
        import_mnn_dump(d, execution=0, out=tmp_path / "run")
    assert expected in caught.value.message and "manifest_000000.tsv row 3" in caught.value.message
    assert caught.value.hint and not (tmp_path / "run").exists()
