"""Hostile or broken arguments get a ToolError and the server keeps serving; cancelling kills children."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from test_mcp_support import MODES, connect, error_text, ok, write_small_cnn

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("mode", MODES)
async def test_paths_outside_the_workspace_are_refused(tmp_path: Path, mode: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    model = write_small_cnn(root)
    secret = write_small_cnn(outside, "secret.onnx")
    (root / "link.onnx").symlink_to(secret)
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    async with connect(root, mode) as client:
        cases = {
            "../outside/secret.onnx": "contains '..'",
            "sub/../../outside/secret.onnx": "contains '..'",
            str(secret): "outside the workspace",
            "link.onnx": "symbolic link",
            "linkdir/secret.onnx": "outside the workspace",
            "/etc/passwd": "outside the workspace",
            "missing.onnx": "does not exist",
            ".": "not a file",
        }
        for raw, expected in cases.items():
            text = error_text(await client.call_tool("baseline", {"model": raw, "background": False}))
            assert expected in text and "Next step" in text, (raw, text)
        text = error_text(await client.call_tool("dump_qnn", {"model": model.name, "out": str(outside / "run")}))
        assert "outside the workspace" in text
        text = error_text(await client.call_tool("baseline", {"model": model.name, "inputs": "../x.npz"}))
        assert "contains '..'" in text
        assert ok(await client.call_tool("baseline", {"model": model.name, "background": False}))["status"] == "succeeded"


@pytest.mark.parametrize("mode", MODES)
async def test_huge_strings_and_wrong_types_are_rejected_before_any_work(tmp_path: Path, mode: str) -> None:
    model = write_small_cnn(tmp_path)
    bad_args: list[dict[str, Any]] = [
        {"model": "m" * 100_000},
        {"model": 12345},
        {"model": ["small_cnn.onnx"]},
        {"model": model.name, "background": "sometimes"},
        {"model": model.name, "seed": -1},
        {"model": model.name, "shapes": {"x": [1, 3, "big"]}},
        {"model": model.name, "shapes": {"x": [0]}},
        {"model": model.name, "shapes": {"x=1": [1]}},
        {},
    ]
    async with connect(tmp_path, mode) as client:
        for args in bad_args:
            text = error_text(await client.call_tool("baseline", args))
            assert "baseline" in text, (args, text)
        assert "2000000" in error_text(await client.call_tool("triage_log", {"log_text": "x" * 2_000_001}))
        assert error_text(await client.call_tool("compare", {"reference": ".", "target": ".", "top": "many"}))
        assert error_text(await client.call_tool("dump_qnn", {"model": model.name, "target": "cloud"}))
        assert error_text(await client.call_tool("dump_qnn", {"model": model.name, "options": {"adb": "/bin/sh"}}))
        assert error_text(await client.call_tool("no_such_tool", {}))
        assert error_text(await client.call_tool("job_status", {"job_id": "x" * 1000}))
        assert ok(await client.call_tool("baseline", {"model": model.name, "background": False}))["status"] == "succeeded"


@pytest.mark.parametrize("mode", MODES)
async def test_existing_output_directories_are_never_overwritten(tmp_path: Path, mode: str) -> None:
    model = write_small_cnn(tmp_path)
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("user data")
    async with connect(tmp_path, mode) as client:
        text = error_text(await client.call_tool("baseline", {"model": model.name, "out": "keep"}))
    assert "already holds files" in text
    assert (tmp_path / "keep" / "notes.txt").read_text() == "user data"
