"""The LLM tools through a real MCP client: llm-check on a tiny export inside the workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export
from test_mcp_support import connect, error_text, ok

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_check_llm_export_tool(tmp_path: Path) -> None:
    build_tiny_export(tmp_path / "export", TinyExportRequest(fault="mul_encoding"))
    async with connect(tmp_path, "auto") as client:
        doc = ok(await client.call_tool("check_llm_export", {"export_dir": "export"}))
        outside = error_text(await client.call_tool("check_llm_export", {"export_dir": "/"}))
        missing = error_text(await client.call_tool("check_llm_export", {"export_dir": "nope"}))
    assert [f["id"] for f in doc["findings"]] == ["mul_output_shares_operand_encoding"]
    assert doc["settings"]["calibration"] == "smooth"
    assert "outside the workspace" in outside and "does not exist" in missing


async def test_compare_llm_text_tool(tmp_path: Path) -> None:
    build_tiny_export(tmp_path / "ref", TinyExportRequest())
    build_tiny_export(tmp_path / "npu", TinyExportRequest(fault="wrong_rotary"))
    async with connect(tmp_path, "auto") as client:
        doc = ok(await client.call_tool("compare_llm_text", {"export_dir": "ref", "target_export": "npu",
                                                             "max_new_tokens": 8, "background": False}))
        bad = error_text(await client.call_tool("compare_llm_text", {"export_dir": "ref", "device_model_dir": "rel/dir"}))
    result = doc.get("result", doc)
    assert result["verdict"] == "diverged" and result["comparison"]["logits_sqnr_median_db"] < 25
    assert "device_model_dir" in bad


async def test_check_llm_export_tool_on_a_vl_export(tmp_path: Path) -> None:
    from qnn_debug_testkit.vl import VLExportRequest, build_vl_export

    build_vl_export(tmp_path / "Qwen3-VL-tiny", VLExportRequest(fault="index_quant"))
    async with connect(tmp_path, "auto") as client:
        doc = ok(await client.call_tool("check_llm_export", {"export_dir": "Qwen3-VL-tiny", "image_sizes": "128x128,100x90"}))
        bad = error_text(await client.call_tool("check_llm_export", {"export_dir": "Qwen3-VL-tiny", "image_sizes": "big"}))
    quant = {f["graph"] for f in doc["findings"] if f["id"] == "quant_on_integer_tensor"}
    assert quant == {"llm.mnn", "visual.mnn"}
    assert doc["visual"]["vision_seq"] == [64, 36] and any(f["id"] == "vl_image_sizes" for f in doc["findings"])
    assert {r["graph"] for r in doc["io_config"]} == {"llm.mnn", "visual.mnn"}
    assert "image_sizes" in bad
