"""llm-check on Qwen3-VL export folders: both graphs, both IO configs, deepstack, image sizes — at two sizes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from qnn_debug.api import execute
from qnn_debug.cli import app
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export
from qnn_debug_testkit.vl import VLExportRequest, build_vl_export
from vl_models import write_small_config

SIZES = ["tiny", "small"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("vlcheck")
    small = str(write_small_config(root / "hf"))
    out: dict[tuple[str, str], Path] = {}
    for size, base in (("tiny", VLExportRequest()), ("small", VLExportRequest(hf_config=small, image_grid=(6, 8)))):
        for fault in (None, "index_quant", "vision_unregistered_op"):
            name = f"Qwen3-VL-{size}-{fault or 'clean'}"
            out[(size, fault or "clean")] = Path(build_vl_export(root / name, base.model_copy(update={"fault": fault})).dir)
    return out


def _check(folder: Path, *extra: str) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["llm-check", str(folder), *extra, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _ids(doc: dict[str, Any]) -> dict[str, list[str | None]]:
    found: dict[str, list[str | None]] = {}
    for f in doc["findings"]:
        found.setdefault(f["id"], []).append(f["graph"])
    return found


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("size", SIZES)
def test_clean_folder_checks_both_graphs_and_both_io_configs(folders: dict[tuple[str, str], Path], size: str) -> None:
    doc = _check(folders[(size, "clean")])
    assert not [f for f in doc["findings"] if f["severity"] == "error"], doc["findings"]
    assert set(_ids(doc)) == {"vl_deepstack_output_dropped", "vl_image_sizes_unknown"}
    v = doc["visual"]
    assert list(v["inputs"]) == ["patches", "position_ids", "attention_mask", "idx_tensor", "weight_tensor"]
    assert v["outputs"] == ["image_embeds", "deepstack_feature"] and v["npu_segments"] >= 1
    assert v["image_sizes"] == [[512, 512]] and v["vision_seq"] == [1024]  # generate_llm_qnn.py's default size
    rows = {(r["graph"], r["name"]): r for r in doc["io_config"]}
    assert rows[("llm.mnn", "position_ids")]["io_config"][0] == 3 and rows[("llm.mnn", "deepstack_embeds")]["io_config"] == [3, 1, 1]
    assert rows[("visual.mnn", "patches")]["io_config"][1] == 1536 and not any(r["problem"] for r in doc["io_config"])
    deep = next(f for f in doc["findings"] if f["id"] == "vl_deepstack_output_dropped")
    assert deep["step"] == 4 and any("omni.cpp:950-954" in s for s in deep["sources"])


@pytest.mark.parametrize("size", SIZES)
def test_quantised_index_tensors_of_both_graphs(folders: dict[tuple[str, str], Path], size: str) -> None:
    doc = _check(folders[(size, "index_quant")])
    quant = [f for f in doc["findings"] if f["id"] == "quant_on_integer_tensor"]
    assert sorted(f["graph"] for f in quant) == ["llm.mnn", "visual.mnn"] and {f["step"] for f in quant} == {3}
    visual = next(f for f in quant if f["graph"] == "visual.mnn")
    assert any(e.startswith("'idx_tensor'") for e in visual["evidence"]) and any(e.startswith("'position_ids'") for e in visual["evidence"])
    assert all(any("QNNBackend.cpp:1738-1779" in s for s in f["sources"]) for f in quant)
    assert doc["findings"][0]["id"] == "quant_on_integer_tensor"  # the first step broken comes first


@pytest.mark.parametrize("size", SIZES)
def test_op_without_a_qnn_creator_in_the_encoders_npu_segment(folders: dict[tuple[str, str], Path], size: str) -> None:
    doc = _check(folders[(size, "vision_unregistered_op")])
    op = doc["findings"][0]
    assert (op["id"], op["graph"], op["step"], op["severity"]) == ("unregistered_op_in_npu_segment", "visual.mnn", 2, "error")
    assert len(op["evidence"]) == 1 and "Tile (OpType 98)" in op["evidence"][0] and "/pos_embed/" in op["evidence"][0]
    assert any("QNNUtils.cpp:115-160" in s for s in op["sources"])
    assert not [f for f in doc["findings"] if f["graph"] == "llm.mnn"]  # the decoder is clean


@pytest.mark.parametrize("size", SIZES)
def test_renamed_folder_gets_the_io_configs_it_would_get(folders: dict[tuple[str, str], Path], size: str,
                                                         tmp_path: Path) -> None:
    doc = _check(_copy(folders[(size, "clean")], tmp_path / "my-export"))
    ids = _ids(doc)
    assert sorted(g or "" for g in ids["vl_io_config_mismatch"]) == ["llm.mnn", "visual.mnn"]
    rows = {(r["graph"], r["name"]): r for r in doc["io_config"]}
    assert rows[("llm.mnn", "position_ids")]["io_config"][0] == 1 and rows[("llm.mnn", "position_ids")]["problem"]
    assert rows[("llm.mnn", "deepstack_embeds")]["io_config"] is None
    visual = next(f for f in doc["findings"] if f["id"] == "vl_io_config_mismatch" and f["graph"] == "visual.mnn")
    assert "Unsupported visual model" in visual["evidence"][0]
    # 'Qwen3' but no 'VL': the encoder's config is right, the decoder's is the text model's
    half = _check(_copy(folders[(size, "clean")], tmp_path / "Qwen3-export"))
    assert _ids(half)["vl_io_config_mismatch"] == ["llm.mnn"]


def test_missing_visual_model_and_missing_deepstack_input(folders: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    gone = _copy(folders[("tiny", "clean")], tmp_path / "Qwen3-VL-novisual")
    (gone / "visual.mnn").unlink()
    doc = _check(gone)
    first = doc["findings"][0]
    assert first["id"] == "visual_model_missing" and first["step"] == 1 and first["severity"] == "error"
    assert any("llmconfig.hpp:134-135" in s for s in first["sources"]) and doc["visual"] is None
    # a text-only export's llm.mnn in a VL folder: no deepstack_embeds, 1-row position ids
    mixed = _copy(folders[("tiny", "clean")], tmp_path / "Qwen3-VL-mixed")
    text = Path(build_tiny_export(tmp_path / "text", TinyExportRequest()).dir)
    for name in ("llm.mnn", "llm.mnn.weight"):
        shutil.copy(text / name, mixed / name)
    doc = _check(mixed)
    runtime = next(f for f in doc["findings"] if f["id"] == "vl_runtime_inputs")
    assert any("no deepstack_embeds input" in e for e in runtime["evidence"])
    assert any("is_mrope" in e for e in runtime["evidence"]) and runtime["step"] == 4
    rows = {(r["graph"], r["name"]): r for r in doc["io_config"]}
    assert rows[("llm.mnn", "deepstack_embeds")]["problem"] == "the IO config feeds it, the graph has no such input"


def test_image_sizes_against_the_runtime_resize(folders: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    doc = _check(folders[("tiny", "clean")], "--image-sizes", "128x128,150x130")
    assert doc["visual"]["vision_seq"] == [64, 80]
    sizes = next(f for f in doc["findings"] if f["id"] == "vl_image_sizes")
    assert sizes["severity"] == "warning" and sizes["evidence"] == ["150x130: compiled as 160x128 (80 patches); feed images of that size"]
    real = _copy(folders[("tiny", "clean")], tmp_path / "Qwen3-VL-realmin")
    cfg = json.loads((real / "llm_config.json").read_text(encoding="utf-8"))
    cfg["image_min_pixels"] = 65536  # what llmexport writes for Qwen3-VL
    (real / "llm_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    doc = _check(real, "--image-sizes", "224x224,256x256")
    sizes = next(f for f in doc["findings"] if f["id"] == "vl_image_sizes")
    assert sizes["severity"] == "error" and sizes["step"] == 4
    assert len(sizes["evidence"]) == 1 and "224x224: 50176 pixels < image_min_pixels 65536" in sizes["evidence"][0]
    bad = CliRunner().invoke(app, ["llm-check", str(real), "--image-sizes", "224", "--json"])
    assert bad.exit_code == 2 and "image" in json.loads(bad.stdout.strip().splitlines()[-1])["message"]


def test_engine_api_and_human_output(folders: dict[tuple[str, str], Path]) -> None:
    r = execute("llm_check", {"export_dir": str(folders[("small", "index_quant")]), "image_sizes": "96x128"})
    assert r.visual is not None and r.visual.vision_seq == [48]
    assert {f.graph for f in r.findings if f.id == "quant_on_integer_tensor"} == {"llm.mnn", "visual.mnn"}
    res = CliRunner().invoke(app, ["llm-check", str(folders[("small", "clean")])])
    assert res.exit_code == 0 and "visual.mnn: " in res.stdout and "[visual.mnn]" in res.stdout


def test_fix_edits_llm_mnn_of_a_vl_folder_and_names_visual_left(folders: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    """`fix` proves its llm.mnn edit on a VL folder (re-checked under the folder's own name) and says visual.mnn is left."""
    folder = _copy(folders[("tiny", "index_quant")], tmp_path / "Qwen3-VL-fix")
    res = CliRunner().invoke(app, ["fix", str(folder), "--out", str(tmp_path / "fixed"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["proven"] is True and "Not edited: visual.mnn" in doc["summary"], doc
    after = _check(folder)
    assert [f["graph"] for f in after["findings"] if f["id"] == "quant_on_integer_tensor"] == ["visual.mnn"]
