"""Device tools against test doubles: the project's recording fake adb/phone, and a hanging adb.

``doubles.fake_phone.FakePhone`` serves a fake phone through a fake ``adb`` on PATH (real adb messages,
a fake ModuleBasic.out); ``hanging_adb_double`` below never answers, like ``adb`` with a wedged USB link.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import anyio
import pytest

from doubles.fake_phone import FakePhone
from test_mcp_support import MODES, connect, error_text, ok

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def hanging_adb_double(folder: Path) -> tuple[Path, Path]:
    """TEST DOUBLE: an ``adb`` that records its pid and then sleeps; returns (executable, pid file)."""
    pids = folder / "hanging-adb.pids"
    exe = folder / "hanging_adb_double"
    exe.write_text(f"#!/bin/sh\necho $$ >> '{pids}'\nexec sleep 600\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, pids


async def _wait_for_pids(pids: Path) -> list[int]:
    """The pids the hanging adb double recorded, once it has started."""
    with anyio.fail_after(60):
        while not (pids.exists() and pids.read_text().strip()):
            await anyio.sleep(0.1)
    return [int(p) for p in pids.read_text().split()]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie left to a non-reaping init counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("mode", MODES)
async def test_list_and_probe_devices_on_a_fake_phone(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    FakePhone.install(tmp_path, monkeypatch, devices="FAKE0001:device,FAKE0002:unauthorized")
    async with connect(tmp_path, mode) as client:
        listed = ok(await client.call_tool("list_devices", {}))
        probed = ok(await client.call_tool("probe_device", {"serial": "FAKE0001"}))
        refused = error_text(await client.call_tool("probe_device", {"serial": "FAKE0002"}))
        hostile = error_text(await client.call_tool("probe_device", {"serial": "x; reboot"}))
    assert [(d["serial"], d["state"]) for d in listed["devices"]] == [("FAKE0001", "device"), ("FAKE0002", "unauthorized")]
    assert listed["ready"] == ["FAKE0001"]
    assert (probed["soc_part"], probed["soc_id"], probed["htp_arch"], probed["ready"]) == ("SM8650", 57, 75, True)
    assert "unauthorized" in refused
    assert "serial" in hostile


@pytest.mark.parametrize("mode", MODES)
async def test_run_on_device_reports_pass_and_fail_as_results(tmp_path: Path, mode: str, mnn_fixtures: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    FakePhone.install(tmp_path, monkeypatch)
    shutil.copy(mnn_fixtures / "test.mnn", tmp_path / "test.mnn")
    shutil.copytree(mnn_fixtures / "testdir", tmp_path / "testdir")
    async with connect(tmp_path, mode) as client:
        passed = ok(await client.call_tool("run_on_device", {"model": "test.mnn", "testdir": "testdir",
                                                             "serial": "FAKE0001"}))
        monkeypatch.setenv("FAKE_MB_MODE", "qnn6000")  # the fake ModuleBasic now prints error code 6000
        failed = ok(await client.call_tool("run_on_device", {"model": "test.mnn", "testdir": "testdir"}))
    assert passed["result"]["status"] == "passed" and passed["result"]["forward_type"] == 5
    assert failed["result"]["status"] == "failed" and failed["summary"].startswith("FAILED")


@pytest.mark.parametrize("mode", MODES)
async def test_a_hanging_adb_gives_tool_errors_and_the_server_keeps_serving(tmp_path: Path, mode: str) -> None:
    adb, pids = hanging_adb_double(tmp_path)
    async with connect(tmp_path, mode, adb=str(adb), device_timeout_s=1.0) as client:
        started = time.monotonic()
        listed = error_text(await client.call_tool("list_devices", {}))
        probed = error_text(await client.call_tool("probe_device", {}))
        assert time.monotonic() - started < 30
        assert ok(await client.call_tool("lookup_op_constraints", {"op": "Relu"}))["kinds"]
    assert "did not finish" in listed and "Next step" in listed
    assert "did not finish" in probed
    assert not any(alive(int(p)) for p in pids.read_text().split())


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_device_run_kills_the_engine_and_adb(tmp_path: Path, mode: str, mnn_fixtures: Path) -> None:
    adb, pids = hanging_adb_double(tmp_path)
    shutil.copy(mnn_fixtures / "test.mnn", tmp_path / "test.mnn")
    shutil.copytree(mnn_fixtures / "testdir", tmp_path / "testdir")
    async with connect(tmp_path, mode, adb=str(adb)) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "run_on_device", {"model": "test.mnn", "testdir": "testdir"})
            hung = await _wait_for_pids(pids)
            engine_group = os.getpgid(hung[0])
            assert engine_group != os.getpgid(0)  # the engine runs in its own process group
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        assert time.monotonic() - cancelled_at < 10
        with anyio.fail_after(10):
            while any(alive(p) for p in hung):
                await anyio.sleep(0.1)
        assert error_text(await client.call_tool("job_status", {"job_id": "none"}))  # still serving


@pytest.mark.parametrize("mode", MODES)
async def test_job_cancel_stops_a_background_dump_and_its_adb(tmp_path: Path, mode: str, mnn_fixtures: Path) -> None:
    adb, pids = hanging_adb_double(tmp_path)
    shutil.copy(mnn_fixtures / "test.mnn", tmp_path / "test.mnn")
    async with connect(tmp_path, mode, adb=str(adb)) as client:
        started = ok(await client.call_tool("dump_qnn", {"model": "test.mnn", "target": "device", "background": True}))
        hung = await _wait_for_pids(pids)
        assert ok(await client.call_tool("job_status", {"job_id": started["job_id"]}))["state"] == "running"
        cancelled = ok(await client.call_tool("job_cancel", {"job_id": started["job_id"]}))
        outcome = ok(await client.call_tool("job_result", {"job_id": started["job_id"]}))
    assert cancelled["state"] == "cancelled" and outcome["state"] == "cancelled" and outcome["result"] is None
    assert not any(alive(p) for p in hung)
