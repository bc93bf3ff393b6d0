"""`fix` on an export folder whose name misleads generate_llm_qnn.py: a link under the right name, re-checked there,
the visual IO JSON with both encoder outputs for a VL export, and command lines that say where each value comes from.
VL exports at two sizes and two text exports, through the CLI, the engine API and an MCP client."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from qnn_debug.api import execute
from qnn_debug.cli import app
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export
from qnn_debug_testkit.tiny_graph import TinyQwen3Config
from qnn_debug_testkit.vl import VLExportRequest, build_vl_export
from vl_models import write_small_config

TEXT = {"a": TinyQwen3Config(), "b": TinyQwen3Config(layers=3, hidden=192, heads=6, kv_heads=2, intermediate=384,
                                                     vocab=400, seed=5)}


@pytest.fixture(scope="module")
def vl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vlname")
    small = str(write_small_config(root / "hf"))
    return {size: Path(build_vl_export(root / f"my-export-{size}", req).dir)
            for size, req in (("tiny", VLExportRequest()), ("small", VLExportRequest(hf_config=small, image_grid=(6, 8))))}


def _fix(path: Path, out: Path, *extra: str) -> tuple[dict[str, Any], str]:
    res = CliRunner().invoke(app, ["fix", str(path), "--out", str(out), *extra, "--json"])
    assert res.exit_code == 0, res.output
    human = CliRunner().invoke(app, ["fix", str(path), "--out", str(out.with_name(out.name + "-h")), *extra])
    return json.loads(res.stdout.strip().splitlines()[-1]), human.output


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_a_vl_folder_under_a_wrong_name_is_linked_rechecked_and_gets_its_visual_io_json(vl: dict[str, Path],
                                                                                      tmp_path: Path, size: str) -> None:
    doc, human = _fix(vl[size], tmp_path / "out")
    assert doc["proven"] is True, doc
    link = Path(doc["artefact"])
    assert link.is_symlink() and Path(os.path.realpath(link)) == vl[size].resolve() and "Qwen3-VL" in link.name
    assert "family_from_folder_name" in doc["findings_before"]
    assert not {"family_from_folder_name", "vl_io_config_mismatch"} & set(doc["findings_after"])
    io = json.loads((tmp_path / "out" / "visual_io.json").read_text())
    cfg = io["configs"][0]
    assert cfg["outputs"] == ["image_embeds", "deepstack_feature"]
    assert [i["name"] for i in cfg["inputs"]] == ["patches", "position_ids", "attention_mask", "idx_tensor", "weight_tensor"]
    assert cfg["inputs"][0]["shape"] == [1024, 1536]  # 512x512, generate_llm_qnn.py's default size
    llm_line, visual_line = doc["commands"]
    assert f"--model {link}" in llm_line and "--input_json" in visual_line and "--model_name visual.mnn" in visual_line
    notes = " ".join(doc["command_notes"])
    assert "default SoC" in notes and "512x512" in notes and "default --image_sizes" in notes and "visual_model" in notes
    # the human output names every value's origin and shows no empty before/after
    assert "after: none" not in human and "before: -" not in human and "value: --soc_id 69 --dsp_arch v79" in human
    assert "PROVEN" in human.splitlines()[0]


@pytest.mark.parametrize("model", sorted(TEXT))
def test_a_text_export_linked_under_a_vl_name_gets_a_link_without_the_family_words(tmp_path: Path, model: str) -> None:
    folder = Path(build_tiny_export(tmp_path / f"text-{model}", TinyExportRequest(config=TEXT[model])).dir)
    wrong = tmp_path / "Qwen3-VL-chat"
    wrong.symlink_to(folder, target_is_directory=True)
    r = execute("fix", {"result": str(wrong), "out": str(tmp_path / "out"), "soc": 57})
    assert r.proven and r.artefact is not None
    assert "VL" not in Path(r.artefact).name and "family_from_folder_name" in r.findings_before
    assert "family_from_folder_name" not in r.findings_after
    assert r.commands == [f"python3 generate_llm_qnn.py --model {r.artefact} --soc_id 57 --dsp_arch v75 "
                          '--mnn_path "$MNN_BUILD"']
    assert any(n.startswith("--soc_id 57 --dsp_arch v75: from --soc 57") for n in r.command_notes)
    assert not (tmp_path / "out" / "visual_io.json").exists()


def test_a_vl_re_export_line_names_the_image_sizes_and_says_the_soc_is_a_default(vl: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "Qwen3-VL-q"
    build_vl_export(folder, VLExportRequest(fault="index_quant"))
    r = execute("fix", {"result": str(folder), "out": str(tmp_path / "out")})
    visual = [c for c in r.commands if "--model_name visual.mnn" in c]
    assert visual and "--image_sizes 512x512" in visual[0]
    assert any("default SoC" in n for n in r.command_notes) and any("512x512" in n for n in r.command_notes)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_fix_and_prove_links_a_misnamed_vl_folder_inside_the_workspace(tmp_path: Path) -> None:
    from test_mcp_support import connect, ok

    build_vl_export(tmp_path / "renamed", VLExportRequest())
    async with connect(tmp_path, "auto") as client:
        answer = ok(await client.call_tool("fix_and_prove", {"result": "renamed", "background": False}))
    r = answer["result"]
    assert r["proven"] and Path(r["artefact"]).is_symlink() and Path(r["artefact"]).is_relative_to(tmp_path)
    assert Path(r["out"], "visual_io.json").is_file() and "vl_io_config_mismatch" not in r["findings_after"]
