"""Acceptance: `--inputs` takes an MNN test dir (input.json + <input>.txt), so a baseline can be built from
exactly the input a device (ModuleBasic) run saw, which is what comparing a real MNN dump needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_debug.errors import BadInputError
from qnn_debug.examples import small_cnn
from qnn_debug.inputs import prepare_inputs
from qnn_debug.mnn.testdir_builder import write_testdir
from qnn_debug.onnx_graph import graph_inputs

CLI = Path(sys.executable).parent / "qnn-debug"


def test_baseline_takes_an_mnn_test_dir_as_inputs(tmp_path: Path) -> None:
    model = tmp_path / "small.onnx"
    onnx.save(small_cnn(), str(model))
    spec = graph_inputs(onnx.load(str(model)))[0]
    x = np.random.default_rng(3).random([int(d) for d in spec.shape]).astype(np.float32)  # type: ignore[arg-type]
    td = write_testdir(tmp_path / "td", {spec.name: x}, [], shape_mutable=False)
    proc = subprocess.run([str(CLI), "baseline", str(model), "--inputs", td.dir, "--no-mnn-gate",
                           "--out", str(tmp_path / "base"), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["report"]["inputs"]["source"] == "testdir:td"
    saved = np.load(tmp_path / "base" / "inputs.npz")[spec.name]
    # the .txt round trip is exact for float32 values written by the test-dir writer
    np.testing.assert_allclose(saved, x, rtol=1e-6, atol=0)


def test_test_dir_without_shapes_and_with_integer_inputs(tmp_path: Path) -> None:
    from qnn_debug.runstore import TensorSpec

    d = tmp_path / "td"
    d.mkdir()
    (d / "input.json").write_text(json.dumps({"inputs": [{"name": "x"}, {"name": "ids"}], "outputs": []}))
    (d / "x.txt").write_text("\n".join(str(v) for v in range(12)))
    (d / "ids.txt").write_text("1\n2\n3\n")
    specs = [TensorSpec(name="x", shape=[1, 3, 2, 2], dtype="float32"), TensorSpec(name="ids", shape=[1, 3], dtype="int64")]
    prepared = prepare_inputs(specs, inputs=d)
    assert prepared.arrays["x"].shape == (1, 3, 2, 2) and prepared.arrays["x"].dtype == np.float32
    assert prepared.arrays["ids"].dtype == np.int64 and prepared.arrays["ids"].tolist() == [[1, 2, 3]]
    (d / "ids.txt").write_text("1.5\n2\n3\n")
    with pytest.raises(BadInputError, match="non-integer"):
        prepare_inputs(specs, inputs=d)
    # a plain directory is still refused, and the hint now names both accepted forms
    with pytest.raises(BadInputError, match="is a directory") as e:
        prepare_inputs(specs, inputs=tmp_path)
    assert e.value.hint and "test dir" in e.value.hint
