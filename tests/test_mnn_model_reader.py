"""The .mnn reader against MNN's own converted fixture model, and against files that are not models."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.mnn.model_reader import qnn_node_name, read_mnn_model


def test_reads_tensor_table_ops_inputs_outputs(mnn_fixtures: Path) -> None:
    m = read_mnn_model(mnn_fixtures / "test.mnn")
    # t<N> in the fixture dumps is entry N of this table (fixture README: t1 = x as NHWC, t2 = r1, ...)
    assert m.tensor_names == ["x", "x___tr4c1", "r1", "c2", "y__before_tr", "y"]
    assert [(o.name, o.type_name, o.inputs, o.outputs) for o in m.ops] == [
        ("x", "Input", [], [0]),
        ("x___tr4c1", "ConvertTensor", [0], [1]),
        ("c1", "Convolution", [1], [2]),
        ("c2", "Convolution", [2], [3]),
        ("y", "Pooling3D", [3], [4]),
        ("y__before_tr", "ConvertTensor", [4], [5]),
    ]
    assert [(i.name, i.index, i.shape, i.dtype, i.data_format) for i in m.inputs] == [
        ("x", 0, [1, 3, 32, 32], "float32", "NCHW")
    ]
    assert m.output_names == ["y"]
    assert not m.is_qnn_plugin_model
    # keepInputFormat: x stays NCHW, the converter's ConvertTensor makes the conv region NC4HW4
    assert [m.tensor_format(i) for i in range(6)] == ["NCHW", "NC4HW4", "NC4HW4", "NC4HW4", "NC4HW4", "NCHW"]
    assert m.producer(2) is not None and m.producer(2).name == "c1"
    assert m.tensor_index("c2") == 3 and m.tensor_name(99) is None


def test_node_name_sanitising_matches_mnn() -> None:
    assert qnn_node_name("/backbone/conv.1:0") == "_backbone_conv_1_0"


@pytest.mark.parametrize("content", [b"", b"abc", b"\x00" * 64, b"\xff" * 4096, b"ONNX" + b"\x08\x07" * 300])
def test_garbage_is_a_clear_bad_input(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.mnn"
    p.write_bytes(content)
    with pytest.raises(BadInputError) as e:
        read_mnn_model(p)
    assert "bad.mnn" in e.value.message


def test_truncated_real_model_is_bad_input(tmp_path: Path, mnn_fixtures: Path) -> None:
    data = (mnn_fixtures / "test.mnn").read_bytes()
    p = tmp_path / "cut.mnn"
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(BadInputError):
        read_mnn_model(p)


def test_missing_model(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        read_mnn_model(tmp_path / "nope.mnn")
