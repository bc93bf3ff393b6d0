"""Run a quick tool's work in a killable child process, bounded by the per-call time limit.

Why not a worker thread: a thread cannot be stopped. A timed-out or cancelled call whose work keeps
running in a thread (a long scan, an adb query stuck on a phone, a read on a hung file system) is
abandoned, not cancelled, and enough of them stall every other tool. A child process in its own
process group is killed with everything it started, before the call returns — so when a call has
timed out, none of its work is still running.

The callable must be picklable by reference (a module-level function) and so must its arguments and
result; engine errors come back as the same typed errors the engine CLI reports.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio

from qnn_debug.errors import BadInputError, TargetError
from qnn_debug.fs import ROOTS_ENV

from .cli_child import PIPE_GRACE_S, _kill_group
from .errors import engine_error_from_document

T = TypeVar("T")
MAX_ANSWER_BYTES = 256 << 20
STDERR_TAIL_LINES = 20


async def call_in_child(fn: Callable[..., T], *args: Any, limit_s: float, what: str,
                        roots: Sequence[Path] | None = None, python: str | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a fresh child process, confined to ``roots``, killed on timeout or cancel.

    Raises the engine's typed error for a failure and a :class:`TargetError` saying the call was stopped
    when it did not finish within ``limit_s`` seconds.
    """
    request = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if roots:
        env[ROOTS_ENV] = os.pathsep.join(str(r) for r in roots)
    out = bytearray()
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    process = await anyio.open_process([python or sys.executable, "-m", "qnn_debug_mcp.child_worker"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=env, start_new_session=True)
    try:
        with anyio.move_on_after(limit_s) as scope:
            await _exchange(process, request, out, tail)
        if scope.cancelled_caught:
            raise TargetError(f"{what} did not answer within {limit_s:.0f} s and was stopped",
                              hint="check the input (size, device, connection) and retry; the server's per-call "
                              "limit is set with --call-timeout")
    finally:
        with anyio.CancelScope(shield=True):
            await _kill_group(process)  # also on success: nothing the call started outlives it
            await process.aclose()
    if not out:
        raise TargetError(f"{what} stopped without an answer (exit status {process.returncode})",
                          hint="retry; if it repeats, report the server's stderr",
                          details={"stderr_tail": list(tail)})
    status, value = pickle.loads(bytes(out))  # our own child wrote it
    if status == "error":
        raise engine_error_from_document(value, int(value.get("exit_code", 2)))
    result: T = value
    return result


async def _exchange(process: Any, request: bytes, out: bytearray, tail: deque[str]) -> None:
    async def send() -> None:
        assert process.stdin is not None
        await process.stdin.send(request)
        await process.stdin.aclose()

    received = anyio.Event()

    async def receive() -> None:
        assert process.stdout is not None
        async for chunk in process.stdout:
            if len(out) + len(chunk) > MAX_ANSWER_BYTES:
                raise BadInputError("the answer is too large to return", hint="pass a smaller input")
            out.extend(chunk)
        received.set()

    async def errors() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            for line in chunk.decode("utf-8", "replace").splitlines():
                if line.strip():
                    tail.append(line[:500])

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        tg.start_soon(receive)
        tg.start_soon(errors)
        await process.wait()
        with anyio.move_on_after(PIPE_GRACE_S):  # a helper it started (adb's server) may hold stderr open
            await received.wait()
        tg.cancel_scope.cancel()
