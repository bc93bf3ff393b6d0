"""Time limits against a real server over stdio: work whose call timed out is killed, not abandoned.

The blocking party is a double named as such: a "hung adb" shell script that records its process ids,
leaves a helper holding its output pipe open (as adb's fork-server does) and then sleeps. No CPU is used,
so only a per-call limit or the stall limit can end it. For each case: a typed error (message + next
step), none of the recorded processes is alive afterwards, and the server still answers a cheap tool.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from test_mcp_support import ok, stdio_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def hung_adb(folder: Path) -> tuple[Path, Path]:
    """An adb double that never answers: writes its pids to ``pids`` and blocks without using CPU."""
    pids = folder / "pids"
    script = folder / "hung-adb"
    script.write_text(f"#!/bin/sh\necho $$ >> '{pids}'\nsleep 300 &\necho $! >> '{pids}'\nexec sleep 300\n")
    script.chmod(0o755)
    return script, pids


def alive(pids: Path) -> list[int]:
    out = []
    for line in pids.read_text().split() if pids.exists() else []:
        try:
            with open(f"/proc/{int(line)}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            out.append(int(line))
    return out


async def typed(client: Client, tool: str, args: dict[str, Any], expected: str, bound: float) -> float:
    start = time.monotonic()
    with anyio.fail_after(bound):
        result = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error and "Next step" in text and "Traceback" not in text, text
    assert expected in text, text
    return time.monotonic() - start


async def serving(client: Client) -> None:
    with anyio.fail_after(30):
        assert ok(await client.call_tool("lookup_op_constraints", {"op": "Conv"}))["query"] == "Conv"


def settle(pids: Path) -> list[int]:
    deadline = time.monotonic() + 5
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


@pytest.mark.parametrize("tool,args", [("list_devices", {}), ("probe_device", {"serial": "hung-1"})])
async def test_timed_out_quick_tool_leaves_nothing_running(tmp_path: Path, tool: str, args: dict[str, Any]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    adb, pids = hung_adb(tmp_path)
    params = stdio_params(root, "--adb", str(adb), "--device-timeout", "1")
    async with Client(params, mode="legacy") as client:
        took = await typed(client, tool, args, "within", bound=40)
        assert pids.exists(), "the double was never started"
        assert settle(pids) == [], "work of the timed-out call is still running"
        assert took < 30
        await serving(client)


async def test_call_timeout_is_the_operators(tmp_path: Path) -> None:
    """--call-timeout bounds a quick tool whose work runs long (a big log scanned by triage_log)."""
    root = tmp_path / "root"
    root.mkdir()
    log = root / "big.log"
    line = b"I/MNN: step 123 of a long and uneventful run, nothing failed here at all .......\n"
    with log.open("wb") as f:
        for _ in range(5):  # 40 MB: about ten seconds of scanning
            f.write(line * 100_000)
    async with Client(stdio_params(root, "--call-timeout", "4"), mode="legacy") as client:
        took = await typed(client, "triage_log", {"log_path": "big.log"}, "within 4 s and was stopped", bound=30)
        assert took < 12
        await serving(client)
        triaged = ok(await client.call_tool("triage_log", {"log_text": "QnnDsp <E> graph finalize failed 1002"}))
        assert triaged["category"]


async def test_engine_run_blocked_on_io_counts_against_the_stall_limit(tmp_path: Path, mnn_fixtures: Path) -> None:
    """A run_on_device whose adb hangs (no CPU, no output) is stopped after --stall-timeout, not after an hour."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(mnn_fixtures / "test.mnn", root / "m.mnn")
    shutil.copytree(mnn_fixtures / "testdir", root / "testdir")
    adb, pids = hung_adb(tmp_path)
    params = stdio_params(root, "--adb", str(adb), "--device-timeout", "300", "--stall-timeout", "4")
    async with Client(params, mode="legacy") as client:
        took = await typed(client, "run_on_device", {"model": "m.mnn", "testdir": "testdir", "serial": "hung-1",
                                                     "background": False},
                           "blocked on I/O", bound=60)
        assert took < 40
        assert settle(pids) == []
        await serving(client)
