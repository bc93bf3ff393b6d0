"""A plain tensor dump of a VL graph (an ``.npz`` keyed by ONNX tensor names, its inputs included) is compared with
``compare``: ``baseline --inputs DUMP`` takes the graph inputs from it and ``compare BASELINE DUMP`` names the first
failing op; ``localise-blocks --inputs DUMP`` runs on the dump's inputs and says how to compare the dump itself.
Two VL encoder sizes; the dump is ONNX Runtime's, rounded to fp16 with the HTP's saturation, one MatMul's output off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from qnn_debug.api import execute
from qnn_debug.cli import app
from qnn_debug_testkit.vl import VLExportRequest, build_vl_export
from vl_models import write_small_config

BROKEN = "/blocks.1/mlp/linear_fc1/MatMul_output_0"


def _plain_dump(model: Path, inputs: Path, out: Path) -> Path:
    """Every tensor of ``model`` on ``inputs``, as a phone dump converted to ONNX names would hold them."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    m = onnx.load(str(model))
    have = {o.name for o in m.graph.output}
    for n in [o for node in m.graph.node for o in node.output if o and o not in have]:
        m.graph.output.append(helper.make_empty_tensor_value_info(n))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = dict(np.load(inputs))
    names = [o.name for o in sess.get_outputs()]
    dump: dict[str, np.ndarray] = dict(feeds)
    for name, value in zip(names, sess.run(names, feeds), strict=True):
        v = np.asarray(value)
        if v.dtype == np.float32:
            v = np.clip(v, -65504, 65504).astype(np.float16).astype(np.float32)
            if name == BROKEN:
                v = v * 1.5
        dump[name] = v
    assert BROKEN in dump
    np.savez(out, **dump)  # type: ignore[arg-type]
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("vldump")
    small = str(write_small_config(root / "hf"))
    out = {}
    for size, req in (("tiny", VLExportRequest()), ("small", VLExportRequest(hf_config=small, image_grid=(6, 8)))):
        folder = Path(build_vl_export(root / f"Qwen3-VL-{size}", req).dir)
        onnx_dir = folder / "onnx"
        out[size] = (folder, _plain_dump(onnx_dir / "visual.onnx", onnx_dir / "visual_inputs.npz", root / f"{size}_dump.npz"))
    return out


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_baseline_takes_the_dumps_inputs_and_compare_names_the_broken_op(dumps: dict[str, tuple[Path, Path]],
                                                                        tmp_path: Path, size: str) -> None:
    folder, dump = dumps[size]
    base = tmp_path / "base"
    res = CliRunner().invoke(app, ["baseline", str(folder / "onnx" / "visual.onnx"), "--inputs", str(dump), "--out", str(base)])
    assert res.exit_code == 0, res.output
    r = execute("compare", {"reference": str(base), "target": str(dump)})
    assert r.verdict.kind == "real_bug" and r.first_failing is not None
    assert r.first_failing.tensor == BROKEN, r.first_failing


def test_localise_blocks_runs_on_the_dumps_inputs_and_points_to_compare(dumps: dict[str, tuple[Path, Path]],
                                                                        tmp_path: Path) -> None:
    folder, dump = dumps["tiny"]
    r = execute("localise_blocks", {"model": str(folder), "inputs": str(dump), "out": str(tmp_path / "blocks")})
    assert r.blocks and any("tensor dump" in w and "qnn-debug compare" in w for w in r.warnings), r.warnings
