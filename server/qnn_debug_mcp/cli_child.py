"""Run one engine CLI command as a child process and return its JSON answer.

Why a child process: MNN and the QNN execution provider write to fd 1, which on stdio *is* the MCP
wire; a native crash must not take the server down; and cancelling means killing, which only works
for processes. The child runs ``python -m qnn_debug <command> ... --json --progress-json`` in its own
session (process group), so a cancel or timeout kills it and everything it started (workers, adb).

Contract (docs/ARCHITECTURE.md, "CLI contract"): stdout holds exactly one JSON document, the result
or ``{"error", "message", "hint", "details"}`` with exit status 2 (bad input) or 3 (target failure);
``run`` exits 1 with its normal result when MNN's numbers fail the check;
progress arrives on stderr as ``@@qnn-debug-progress {json}`` lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from qnn_debug.errors import TargetError
from qnn_debug.progress import PROGRESS_PREFIX, ProgressEvent

from .errors import engine_error_from_document

ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]

MAX_STDOUT_BYTES = 64 << 20  # a compare/diagnose answer is KBs; anything near this is a bug
STDERR_TAIL_LINES = 40
KILL_GRACE_S = 3.0  # between SIGTERM and SIGKILL
PIPE_GRACE_S = 2.0  # after exit, how long a grandchild may keep our pipes open
# 0, or 1 with a result document: the command ran and its verdict is "failed" (e.g. `run` when
# ModuleBasic's numbers are off) — a finding for the model to read, not a tool failure.
ACCEPTED_STATUSES = (0, 1)


class EngineRun:
    """One finished child: its exit status, parsed answer and the tail of its stderr."""

    def __init__(self, returncode: int, document: Any, stderr_tail: list[str]):
        self.returncode = returncode
        self.document = document
        self.stderr_tail = stderr_tail


def engine_command(python: str, command: Sequence[str]) -> list[str]:
    """The argument list for one engine command (never a shell string)."""
    return [python, "-m", "qnn_debug", *command, "--json", "--progress-json"]


async def run_engine(
    python: str,
    command: Sequence[str],
    *,
    on_progress: ProgressCallback | None = None,
    timeout: float,
    stall_s: float | None = None,
) -> dict[str, Any]:
    """Run ``qnn-debug <command>`` and return its result document, or raise the engine's error
    (:class:`~qnn_debug.errors.QnnDebugError`).

    Cancellation (the client's ``notifications/cancelled``, a job cancel, server shutdown), the
    timeout and a stall (``stall_s`` seconds with no CPU used by the child's process group and nothing
    printed: blocked on I/O) all kill the child's whole process group before this returns.
    """
    argv = engine_command(python, command)
    what = f"qnn-debug {command[0]}" if command else "qnn-debug"
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        run = await _run(argv, on_progress, timeout, child_env, what, stall_s)
    except FileNotFoundError as e:
        raise TargetError(f"cannot start the engine ({e.strerror}: {argv[0]})", hint="reinstall mnn-qnn-debug") from None
    return _interpret(run, what)


async def _run(
    argv: list[str],
    on_progress: ProgressCallback | None,
    timeout: float,
    env: dict[str, str],
    what: str,
    stall_s: float | None = None,
) -> EngineRun:
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    out = bytearray()
    stalled = False
    seen = [0]  # stderr bytes so far (progress included): output counts as activity
    process = await anyio.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, start_new_session=True,
    )
    try:
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:
                if stall_s is not None:
                    async def watch() -> None:
                        nonlocal stalled
                        await _wait_for_stall(process.pid, stall_s, lambda: len(out) + seen[0])
                        stalled = True
                        tg.cancel_scope.cancel()

                    tg.start_soon(watch)
                await _drain_until_exit(process, on_progress, out, tail, seen)
                tg.cancel_scope.cancel()
        if stalled:
            await _kill_group(process)
            raise TargetError(
                f"{what} used no CPU and printed nothing for {stall_s:.0f} s (blocked on I/O: a hung device, "
                "adb or file system) and was stopped",
                hint="check the device/connection or the files it reads, then retry; the limit is the server's "
                "--stall-timeout",
                details={"stderr_tail": list(tail)},
            )
        if scope.cancelled_caught:
            await _kill_group(process)
            raise TargetError(
                f"{what} did not finish within {timeout:.0f} s and was stopped",
                hint="run it as a background job (background=true) or use a smaller model/input",
                details={"stderr_tail": list(tail)},
            )
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _kill_group(process)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()
    document: Any = None
    with contextlib.suppress(ValueError):
        document = json.loads(out.decode("utf-8", "replace")) if out.strip() else None
    return EngineRun(process.returncode if process.returncode is not None else -1, document, list(tail))


STALL_POLL_S = 1.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_cpu_ticks(pgid: int) -> int | None:
    """CPU time (clock ticks, incl. reaped children) of every process in group ``pgid``; None without /proc."""
    total, found = 0, False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 14 and int(fields[2]) == pgid:
            found = True
            total += sum(int(x) for x in fields[11:15])
    return total if found else None


async def _wait_for_stall(pgid: int, stall_s: float, output_seen: Callable[[], int]) -> None:
    """Return once the group has used no CPU and printed nothing for ``stall_s`` seconds."""
    last = (group_cpu_ticks(pgid), output_seen())
    idle_since = anyio.current_time()
    while True:
        await anyio.sleep(min(STALL_POLL_S, stall_s / 4))
        now = (group_cpu_ticks(pgid), output_seen())
        if now != last:
            last, idle_since = now, anyio.current_time()
        elif anyio.current_time() - idle_since >= stall_s:
            return


async def _drain_until_exit(process: Process, on_progress: ProgressCallback | None, out: bytearray,
                            tail: deque[str], seen: list[int] | None = None) -> None:
    """Read both pipes until the child exits; a grandchild holding a pipe open cannot stall us."""
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None
    stdout_done, stderr_done = anyio.Event(), anyio.Event()

    async def read_stdout() -> None:
        await _collect_stdout(stdout, out)
        stdout_done.set()

    async def read_stderr() -> None:
        await _pump_stderr(stderr, on_progress, tail, seen)
        stderr_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(read_stderr)
        await process.wait()
        with anyio.move_on_after(PIPE_GRACE_S):
            await stdout_done.wait()
            await stderr_done.wait()
        tg.cancel_scope.cancel()


async def _collect_stdout(stream: ByteReceiveStream, out: bytearray) -> None:
    async for chunk in stream:
        if len(out) < MAX_STDOUT_BYTES:
            out.extend(chunk[: MAX_STDOUT_BYTES - len(out)])


async def _pump_stderr(stream: ByteReceiveStream, on_progress: ProgressCallback | None, tail: deque[str],
                       seen: list[int] | None = None) -> None:
    """Progress lines go to the callback; the last other lines are kept to explain failures."""
    buf = b""
    async for chunk in stream:
        if seen is not None:
            seen[0] += len(chunk)
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            await _handle_line(raw.decode("utf-8", "replace"), on_progress, tail)
    if buf:
        await _handle_line(buf.decode("utf-8", "replace"), on_progress, tail)


async def _handle_line(line: str, on_progress: ProgressCallback | None, tail: deque[str]) -> None:
    if line.startswith(PROGRESS_PREFIX):
        try:
            event = ProgressEvent(**json.loads(line[len(PROGRESS_PREFIX):]))
        except (TypeError, ValueError):
            event = None
        if event is not None:
            if on_progress is not None:
                await on_progress(event)
            return
    if line.strip():
        tail.append(line[:500])


async def _kill_group(process: Process) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left after a short grace."""
    if process.returncode is not None:
        _signal_group(process.pid, signal.SIGKILL)  # the child is gone; make sure its helpers are too
        return
    _signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()
    _signal_group(process.pid, signal.SIGKILL)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _interpret(run: EngineRun, what: str) -> dict[str, Any]:
    doc = run.document
    if isinstance(doc, dict) and "error" in doc and "message" in doc:
        raise engine_error_from_document(doc, run.returncode)
    if isinstance(doc, dict) and run.returncode in ACCEPTED_STATUSES:
        return doc
    last = run.stderr_tail[-3:] if run.stderr_tail else ["(no output)"]
    if run.returncode < 0:
        name = signal.Signals(-run.returncode).name if -run.returncode in signal.Signals._value2member_map_ else "?"
        message = f"{what} crashed (signal {name})"
    elif run.returncode == 0:
        message = f"{what} finished but printed no JSON result"
    else:
        message = f"{what} failed with exit status {run.returncode}"
    raise TargetError(f"{message}: {' | '.join(last)}", hint="check the arguments; the engine's own message is above",
                      details={"stderr_tail": run.stderr_tail, "returncode": run.returncode})



def engine_work(ctx: Any, command: list[str], transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Any:
    """The work of a long tool that still runs an engine CLI command (see :func:`run_engine`)."""
    from .tool_context import app_state, confined

    state = app_state(ctx)
    command = confined(ctx, command)

    async def work(on_progress: ProgressCallback) -> dict[str, Any]:
        result = await run_engine(state.config.python, command, on_progress=on_progress,
                                  timeout=state.config.long_timeout_s, stall_s=state.config.stall_timeout_s)
        return transform(result) if transform else result

    return work
