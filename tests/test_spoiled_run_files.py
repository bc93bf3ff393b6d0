"""Run and baseline folders whose files are not what qnn-debug wrote, through the CLI (bounded: a hang fails).

A tensor .npy that is a FIFO, a directory or an array of strings, and a baseline.json without its reference run,
must each end in a typed error (exit 2) naming the file and saying what to do, on two different models; and a
reference whose run.json names a model outside --root is never loaded for the local re-run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import hostile
from test_mcp_support import write_small_cnn

BOUND_S = 60


def _mlp(folder: Path) -> Path:
    """A second model, unlike the CNN: MatMul → Relu → MatMul on a flat input."""
    rng = np.random.default_rng(3)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [16, 24], rng.standard_normal((16, 24)).astype(np.float32).ravel())
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [24, 8], rng.standard_normal((24, 8)).astype(np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), helper.make_node("Relu", ["h"], ["r"], name="act"),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], initializer=[w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "mlp.onnx")
    return folder / "mlp.onnx"


def _cli(cwd: Path, *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    ran = subprocess.run([sys.executable, "-m", "qnn_debug", "--root", str(cwd), *argv, "--json"], capture_output=True,
                         text=True, timeout=BOUND_S, cwd=cwd)  # a FIFO opened for reading would hang here
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran.returncode, json.loads(ran.stdout)


@pytest.fixture(scope="module", params=["cnn", "mlp"])
def baseline(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    model = write_small_cnn(root, "cnn.onnx") if request.param == "cnn" else _mlp(root)
    code, doc = _cli(root, "baseline", str(model), "--out", str(root / "base"), "--no-mnn-gate")
    assert code == 0, doc
    return root / "base"


@pytest.mark.parametrize(("label", "expected"), [("fifo", "is not a regular file"), ("directory", "is a directory"),
                                                 ("strings", "holds <U2 values (strings), not numbers")])
def test_a_spoiled_tensor_file_is_a_typed_error_naming_it(baseline: Path, tmp_path: Path, label: str,
                                                          expected: str) -> None:
    root = baseline.parent
    run = root / f"spoiled-{label}-{tmp_path.name}"
    shutil.copytree(baseline / "reference", run)
    victim = hostile.spoil_first_tensor(run, label)
    spoiled_base = root / f"spoiled-base-{label}-{tmp_path.name}"
    shutil.copytree(baseline, spoiled_base)
    hostile.spoil_first_tensor(spoiled_base / "reference", label)
    for argv in (["compare", str(baseline), str(run)], ["compare", str(spoiled_base), str(baseline / "reference")]):
        code, doc = _cli(root, *argv)
        assert code == 2 and doc["error"] == "bad_input", doc
        assert expected in doc["message"] and "tensor file" in doc["message"], doc
        assert "re-run the capture" in doc["hint"], doc
        if argv[2] == str(run):
            assert str(victim) in doc["message"]


def test_a_baseline_without_its_reference_run_is_a_typed_error(baseline: Path, tmp_path: Path) -> None:
    root = baseline.parent
    broken = root / f"no-reference-{tmp_path.name}"
    shutil.copytree(baseline, broken)
    doc = json.loads((broken / "baseline.json").read_text())
    del doc["runs"]["reference"]
    (broken / "baseline.json").write_text(json.dumps(doc))
    code, err = _cli(root, "testdir", str(root / f"td-{tmp_path.name}"), "--baseline", str(broken))
    assert code == 2 and err["error"] == "bad_input", err
    assert "names no reference run" in err["message"] and "baseline.json" in err["message"], err
    assert "qnn-debug baseline" in err["hint"]
    assert not (root / f"td-{tmp_path.name}").exists()


def test_a_reference_model_outside_the_roots_is_not_loaded_for_local_checks(baseline: Path, tmp_path: Path) -> None:
    root = baseline.parent
    outside = tmp_path / "outside"
    outside.mkdir()
    model = sorted(root.glob("*.onnx"))[0]
    shutil.copy(model, outside / model.name)
    moved = root / f"moved-{tmp_path.name}"
    shutil.copytree(baseline, moved)
    run_json = moved / "reference" / "run.json"
    rec = json.loads(run_json.read_text())
    rec["model"]["path"] = str(outside / model.name)
    run_json.write_text(json.dumps(rec))
    target = root / f"target-{tmp_path.name}"
    shutil.copytree(baseline / "reference", target)
    first_op = sorted((target / "tensors").iterdir())[1]  # the first op's output, made wrong so it is a suspect
    np.save(first_op, np.load(first_op) * 0 + 1e3)
    code, doc = _cli(root, "compare", str(moved), str(target))
    assert code == 0, doc
    assert doc["counts"]["local_checks"] == 0
    assert any("outside the allowed roots" in w for w in doc["warnings"]), doc["warnings"]
