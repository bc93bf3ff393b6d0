"""The one process supervisor (``qnn_debug.process``): limits, stalls, the kill rule, output handling.

Real children (small Python programs), real signals, and /proc to check that nothing survives.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from qnn_debug import process
from qnn_debug.progress import PROGRESS_PREFIX, ProgressEvent

PY = sys.executable


def alive(pids_file: Path) -> list[int]:
    """Pids listed in ``pids_file`` (one per line) that still run (zombies count as gone)."""
    out = []
    for line in pids_file.read_text().split() if pids_file.exists() else []:
        try:
            with open(f"/proc/{int(line)}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(int(line))
    return out


def settle(pids_file: Path, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while alive(pids_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids_file)


def family(tmp_path: Path, *, then: str = "time.sleep(300)") -> list[str]:
    """A child that starts a helper in its own group and one in a session of its own, records all pids, then ``then``."""
    pids = tmp_path / "pids"
    code = f"""
import os, subprocess, sys, time
pids = open({str(pids)!r}, "a")
pids.write(f"{{os.getpid()}}\\n"); pids.flush()
same = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
pids.write(f"{{same.pid}}\\n{{own.pid}}\\n"); pids.flush()
print("ready", flush=True)
{then}
"""
    return [PY, "-c", code]


def wait_for(pids_file: Path, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(pids_file.read_text().split() if pids_file.exists() else []) < n:
        assert time.monotonic() < deadline, "the child never started its helpers"
        time.sleep(0.05)


def test_timeout_kills_the_whole_tree_even_helpers_in_their_own_session(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(process.ChildTimeout) as caught:
        process.run(family(tmp_path), timeout=3)
    assert not caught.value.stalled and caught.value.limit_s == 3
    assert "ready" in caught.value.output
    assert time.monotonic() - start < 15
    assert settle(tmp_path / "pids") == []


def test_a_normal_exit_takes_the_helpers_of_its_group_along(tmp_path: Path) -> None:
    done = process.run(family(tmp_path, then="sys.exit(3)"), timeout=60)
    assert done.returncode == 3 and done.status() == "exit status 3"
    wait_for(tmp_path / "pids", 3)
    left = settle(tmp_path / "pids")
    # the helper in the child's own group is gone; the one that made a session of its own (as adb's server
    # does) is not ours to kill after a normal exit
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert pids[1] not in left and pids[0] not in left
    for pid in left:
        os.kill(pid, 9)


def test_a_child_blocked_on_io_is_a_stall_and_a_busy_one_is_not(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(process.ChildTimeout) as caught:
        process.run([PY, "-c", "import time; print('x', flush=True); time.sleep(300)"], timeout=120, stall_s=2)
    assert caught.value.stalled and time.monotonic() - start < 20
    busy = "import time\nend = time.time() + 4\nwhile time.time() < end: pass\nprint('done')"
    assert process.run([PY, "-c", busy], timeout=60, stall_s=2).text.strip() == "done"


def test_progress_lines_become_events_and_the_rest_is_kept(tmp_path: Path) -> None:
    event = {"stage": "save", "done": 1, "total": 2, "message": ""}
    code = (f"import sys; sys.stderr.write({PROGRESS_PREFIX!r} + {json.dumps(json.dumps(event))} + '\\n'); "
            "sys.stderr.write('plain line\\n'); print('out' * 10)")
    seen: list[ProgressEvent] = []
    log = tmp_path / "log.txt"
    with log.open("w") as f:
        done = process.run([PY, "-c", code], timeout=60, on_progress=seen.append, log=f, max_stdout=12)
    assert [(e.stage, e.done, e.total) for e in seen] == [("save", 1, 2)]
    assert done.stderr_lines == ["plain line"] and log.read_text() == "plain line\n"
    assert done.stdout == b"outoutoutout" and done.stdout_truncated


def test_a_crash_is_reported_by_its_signal() -> None:
    done = process.run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"], timeout=60)
    assert done.status() == "signal SIGSEGV"


def test_a_missing_program_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        process.run([str(tmp_path / "no-such-program")], timeout=5)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_async_cancel_kills_the_tree(tmp_path: Path, anyio_backend: str) -> None:
    pids = tmp_path / "pids"
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: process.run_async(family(tmp_path), timeout=300))
        with anyio.fail_after(30):
            while len(pids.read_text().split() if pids.exists() else []) < 3:
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert settle(pids) == []


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_async_stall_and_progress(tmp_path: Path, anyio_backend: str) -> None:
    seen: list[ProgressEvent] = []

    async def note(event: ProgressEvent) -> None:
        seen.append(event)

    code = (f"import sys, time; sys.stderr.write({PROGRESS_PREFIX!r} + '{{\"stage\": \"s\", \"done\": 0, \"total\": null, \"message\": \"\"}}\\n'); "
            "sys.stderr.flush(); time.sleep(300)")
    with pytest.raises(process.ChildTimeout) as caught:
        await process.run_async([PY, "-c", code], timeout=120, stall_s=2, on_progress=note)
    assert caught.value.stalled and [e.stage for e in seen] == ["s"]
