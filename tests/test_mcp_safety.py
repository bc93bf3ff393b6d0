"""Hostile or broken arguments get a ToolError and the server keeps serving; cancelling kills children."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
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
    bad_args = [
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


def _live_group_members(pgid: int) -> list[int]:
    """Processes (not zombies) in process group ``pgid``, read from /proc."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(entry.name))
    return alive


def _engine_children(marker: str) -> list[int]:
    """Engine CLI processes whose command line names ``marker`` (our unique tmp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if "qnn_debug " in cmd and marker in cmd and int(entry.name) != os.getpid():
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_long_call_kills_its_child_processes(tmp_path: Path, mode: str) -> None:
    import onnx

    from qnn_debug.examples import deep_conv_net

    onnx.save(deep_conv_net(blocks=24), str(tmp_path / "deep.onnx"))
    groups: list[int] = []
    cancel = anyio.CancelScope()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        groups.extend(os.getpgid(pid) for pid in _engine_children(str(tmp_path)))
        cancel.cancel()

    async with connect(tmp_path, mode) as client:
        with cancel:
            await client.call_tool("baseline", {"model": "deep.onnx", "background": False}, progress_callback=on_progress)
        assert groups, "the engine child was not seen running"
        with anyio.move_on_after(10):
            while any(_live_group_members(g) for g in groups):
                await anyio.sleep(0.1)
        assert not any(_live_group_members(g) for g in groups)
        # the server is still serving
        assert error_text(await client.call_tool("job_status", {"job_id": "gone"}))
