"""llm-check reads an export folder under the name it is given, links kept: generate_llm_qnn.py guesses the model
family from its --model string, so a folder linked under the right name is fine and one linked under a wrong name is
not, whatever the folder it points to is called. Text exports (two model sizes) and VL exports (two sizes), through
the engine API, the CLI and an MCP client."""

from __future__ import annotations

import json
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
FAMILY = "family_from_folder_name"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("linked")
    out = {f"text-{k}": Path(build_tiny_export(root / f"text-{k}", TinyExportRequest(config=c)).dir) for k, c in TEXT.items()}
    small = str(write_small_config(root / "hf"))
    for size, req in (("tiny", VLExportRequest()), ("small", VLExportRequest(hf_config=small, image_grid=(6, 8)))):
        out[f"vl-{size}"] = Path(build_vl_export(root / f"my-export-{size}", req).dir)  # a name with no family in it
    return out


def _cli(folder: Path) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["llm-check", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _ids(doc: dict[str, Any]) -> set[str]:
    return {f["id"] for f in doc["findings"]}


@pytest.mark.parametrize("model", sorted(TEXT))
def test_a_text_export_linked_under_a_vl_name_is_reported_under_that_name(built: dict[str, Path], tmp_path: Path,
                                                                          model: str) -> None:
    link = tmp_path / "Qwen3-VL-from-link"
    link.symlink_to(built[f"text-{model}"], target_is_directory=True)
    assert FAMILY not in _ids(_cli(built[f"text-{model}"]))  # the folder under its own name is fine
    doc = _cli(link)
    family = next(f for f in doc["findings"] if f["id"] == FAMILY)
    assert any("contains both 'Qwen' and 'VL'" in e for e in family["evidence"])
    assert any(str(link) in e and "a link to" in e for e in family["evidence"])
    r = execute("llm_check", {"export_dir": str(link)})
    assert FAMILY in {f.id for f in r.findings}


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_a_vl_export_linked_under_the_right_name_is_accepted(built: dict[str, Path], tmp_path: Path, size: str) -> None:
    folder = built[f"vl-{size}"]
    wrong = _ids(_cli(folder))
    assert "vl_io_config_mismatch" in wrong  # under its own name generate_llm_qnn.py would refuse it
    link = tmp_path / f"Qwen3-VL-{size}-linked"
    link.symlink_to(folder, target_is_directory=True)
    doc = _cli(link)
    assert not {"vl_io_config_mismatch", FAMILY} & _ids(doc), doc["findings"]
    assert not [f for f in doc["findings"] if f["severity"] == "error"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_keeps_the_link_name_and_still_confines_the_real_folder(built: dict[str, Path], tmp_path: Path) -> None:
    from test_mcp_support import connect, error_text, ok

    inside = tmp_path / "ws"
    inside.mkdir()
    real = inside / "my-export"
    real.symlink_to(built["vl-tiny"], target_is_directory=True)  # its target is outside the workspace: refused
    good = inside / "exports"
    good.mkdir()
    build_vl_export(good / "vl-under-any-name", VLExportRequest())
    (inside / "Qwen3-VL-ws-link").symlink_to(good / "vl-under-any-name", target_is_directory=True)
    async with connect(inside, "auto") as client:
        linked = ok(await client.call_tool("check_llm_export", {"export_dir": "Qwen3-VL-ws-link"}))
        plain = ok(await client.call_tool("check_llm_export", {"export_dir": "exports/vl-under-any-name"}))
        outside = error_text(await client.call_tool("check_llm_export", {"export_dir": "my-export"}))
    assert "vl_io_config_mismatch" in _ids(plain)
    assert not {"vl_io_config_mismatch", FAMILY} & _ids(linked), linked["findings"]
    assert "outside the workspace" in outside
