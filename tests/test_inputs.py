"""Inputs: --shape parsing, dynamic dims, seeded realistic data, and every way an .npz can be wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from qnn_debug.errors import BadInputError
from qnn_debug.examples import small_cnn
from qnn_debug.inputs import (
    fix_input_shapes,
    load_npz,
    parse_shape_args,
    prepare_inputs,
    random_inputs,
    resolve_shapes,
    save_npz,
)
from qnn_debug.onnx_graph import graph_inputs
from qnn_debug.runstore import TensorSpec

IMG = TensorSpec(name="x", shape=[None, 3, "h", "w"], dtype="float32")
IDS = TensorSpec(name="ids", shape=[1, 8], dtype="int64")


def _two_input_model() -> onnx.ModelProto:
    """x[N,3,H,W] float, ids[1,8] int64 → (ReduceMean(x) over all axes, ids+1)."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], name="mean", keepdims=0),
        helper.make_node("Add", ["ids", "one"], ["ids1"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
                       helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("ids1", TensorProto.INT64, [1, 8])],
        [helper.make_tensor("one", TensorProto.INT64, [], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_parse_shape_args_accepts_x_and_comma_forms() -> None:
    assert parse_shape_args(["x=1x3x224x224", "ids = 1,8"]) == {"x": [1, 3, 224, 224], "ids": [1, 8]}
    assert parse_shape_args(None) == {}


@pytest.mark.parametrize("bad", ["x", "x=", "=1x3", "x=1x0x4", "x=ax3", "x=1x3x"])
def test_parse_shape_args_rejects_malformed(bad: str) -> None:
    with pytest.raises(BadInputError) as e:
        parse_shape_args([bad])
    assert e.value.hint


def test_parse_shape_args_rejects_duplicates() -> None:
    with pytest.raises(BadInputError, match="twice"):
        parse_shape_args(["x=1x3", "x=1x4"])


def test_dynamic_dims_need_a_shape() -> None:
    with pytest.raises(BadInputError) as e:
        resolve_shapes([IMG])
    assert "dynamic" in e.value.message and "--shape x=Nx3xNxN" in (e.value.hint or "")
    assert resolve_shapes([IMG], {"x": [1, 3, 48, 192]}) == {"x": [1, 3, 48, 192]}


def test_shape_conflicts_are_reported() -> None:
    with pytest.raises(BadInputError, match="fixed to 3"):
        resolve_shapes([IMG], {"x": [1, 4, 48, 192]})
    with pytest.raises(BadInputError, match="rank 3"):
        resolve_shapes([IMG], {"x": [1, 48, 192]})
    with pytest.raises(BadInputError, match="does not have: y"):
        resolve_shapes([IMG], {"x": [1, 3, 8, 8], "y": [1]})


def test_random_inputs_are_seeded_realistic_and_typed() -> None:
    shapes = {"x": [1, 3, 64, 64], "ids": [1, 8]}
    a = random_inputs([IMG, IDS], shapes, seed=3)
    b = random_inputs([IMG, IDS], shapes, seed=3)
    c = random_inputs([IMG, IDS], shapes, seed=4)
    assert np.array_equal(a["x"], b["x"]) and not np.array_equal(a["x"], c["x"])
    x = a["x"]
    assert x.dtype == np.float32 and x.shape == (1, 3, 64, 64)
    assert x.min() >= 0.0 and x.max() <= 1.0
    # a text page: mostly light background, a real share of dark strokes
    dark = float((x < 0.5).mean())
    assert 0.05 < dark < 0.5 and float(np.median(x)) > 0.8
    assert a["ids"].dtype == np.int64 and a["ids"].min() >= 0


def test_non_image_float_inputs_are_smooth_positive() -> None:
    spec = TensorSpec(name="v", shape=[2, 40], dtype="float32")
    v = random_inputs([spec], {"v": [2, 40]}, seed=0)["v"]
    assert v.min() >= 0 and v.max() <= 1 and v.std() > 0.05


def _npz(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def test_load_npz_accepts_matching_data(tmp_path: Path) -> None:
    x = np.zeros((1, 3, 8, 8), np.float32)
    arrays, warnings = load_npz(_npz(tmp_path, x=x, ids=np.ones((1, 8), np.int64)), [IMG, IDS])
    assert arrays["x"].shape == (1, 3, 8, 8) and warnings == []


def test_load_npz_converts_float64_with_a_warning(tmp_path: Path) -> None:
    arrays, warnings = load_npz(_npz(tmp_path, x=np.zeros((1, 3, 8, 8)), ids=np.ones((1, 8), np.int64)), [IMG, IDS])
    assert arrays["x"].dtype == np.float32 and "float64" in warnings[0]


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"x": np.zeros((1, 3, 8, 8), np.float32)}, "missing ids"),
        ({"x": np.zeros((1, 3, 8, 8), np.float32), "ids": np.ones((1, 8), np.int64), "extra": np.ones(2)}, "unknown extra"),
        ({"x": np.zeros((1, 3, 8, 8), np.int32), "ids": np.ones((1, 8), np.int64)}, "dtype int32"),
        ({"x": np.zeros((1, 3, 8, 8), np.float32), "ids": np.ones((1, 8), np.float32)}, "expects int64"),
        ({"x": np.zeros((1, 4, 8, 8), np.float32), "ids": np.ones((1, 8), np.int64)}, "fixed to 3"),
        ({"x": np.zeros((3, 8, 8), np.float32), "ids": np.ones((1, 8), np.int64)}, "rank 3"),
    ],
)
def test_load_npz_mismatches_are_clear(tmp_path: Path, arrays: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(BadInputError, match=match) as e:
        load_npz(_npz(tmp_path, **arrays), [IMG, IDS])
    assert e.value.hint and e.value.exit_code == 2


def test_load_npz_bad_files(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        load_npz(tmp_path / "nope.npz", [IMG])
    with pytest.raises(BadInputError, match="is a directory"):
        load_npz(tmp_path, [IMG])
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"PK\x03\x04 this is not a zip archive at all")
    with pytest.raises(BadInputError, match=r"not a readable \.npz"):
        load_npz(corrupt, [IMG])
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(BadInputError, match=r"single \.npy"):
        load_npz(single, [IMG])
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(BadInputError, match=r"not a readable \.npz"):
        load_npz(pickled, [IMG])
    truncated = tmp_path / "truncated.npz"
    good = _npz(tmp_path, x=np.zeros((1, 3, 8, 8), np.float32))
    truncated.write_bytes(good.read_bytes()[:60])
    with pytest.raises(BadInputError, match=r"not a readable \.npz"):
        load_npz(truncated, [IMG])


def test_shape_given_with_npz_must_agree(tmp_path: Path) -> None:
    path = _npz(tmp_path, x=np.zeros((1, 3, 8, 8), np.float32), ids=np.ones((1, 8), np.int64))
    with pytest.raises(BadInputError, match="disagrees"):
        load_npz(path, [IMG, IDS], {"x": [1, 3, 16, 16]})


def test_prepare_inputs_hash_and_round_trip(tmp_path: Path) -> None:
    specs = graph_inputs(_two_input_model())
    first = prepare_inputs(specs, shapes={"x": [1, 3, 20, 24]}, seed=1)
    assert first.info.source == "random:seed=1" and first.shapes["x"] == [1, 3, 20, 24]
    saved = save_npz(tmp_path / "sub" / "inputs.npz", first.arrays)
    again = prepare_inputs(specs, inputs=saved)
    assert again.info.sha256 == first.info.sha256 and again.info.source == "npz:inputs.npz"
    assert not list((tmp_path / "sub").glob(".*tmp"))  # no temp file left behind


def test_prepare_inputs_rejects_models_without_inputs() -> None:
    with pytest.raises(BadInputError, match="no inputs"):
        prepare_inputs([])


def test_fix_input_shapes_makes_static_model_that_runs() -> None:
    model = _two_input_model()
    fixed = fix_input_shapes(model, {"x": [1, 3, 5, 7], "ids": [1, 8]})
    dims = [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 5, 7]
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["N", "", "H", "W"]  # original kept
    sess = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape == [1, 3, 5, 7]
    feeds = random_inputs(graph_inputs(fixed), {"x": [1, 3, 5, 7], "ids": [1, 8]})
    m, ids1 = sess.run(None, feeds)
    assert np.isclose(m, feeds["x"].mean(), rtol=1e-5) and np.array_equal(ids1, feeds["ids"] + 1)


def test_static_model_needs_no_shape() -> None:
    prepared = prepare_inputs(graph_inputs(small_cnn()))
    assert prepared.shapes == {"x": [1, 3, 32, 32]}
