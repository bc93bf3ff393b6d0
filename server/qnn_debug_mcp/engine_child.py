"""Run one engine operation for a tool call in a child process: the request goes in, the result comes back.

Why a child process: MNN and the QNN execution provider write to fd 1, which on stdio *is* the MCP
wire; a native crash must not take the server down; and cancelling means killing, which only works
for processes. The child is the engine's worker entry running :mod:`qnn_debug.api.worker`: it gets
``{"operation", "request"}`` (the request model as JSON), answers with the result model as JSON or
the engine's typed error (class, message, hint, details), and reports progress on the side. It is
confined to the call's roots (``QNN_DEBUG_ROOTS``), so the engine re-checks every file it opens, and
it is supervised by :mod:`qnn_debug.process`: a cancel, the time limit or a stall (no CPU, no output
for ``stall_s``: blocked on I/O) kills its whole process tree before this returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from qnn_debug import workers
from qnn_debug.errors import TargetError
from qnn_debug.process import AsyncProgress, ChildTimeout

WORKER = "qnn_debug.api.worker"


@dataclass(frozen=True)
class Limits:
    """How long one call's child may run, and how its stop is worded."""

    seconds: float
    stall_s: float | None = None
    quick: bool = False  # a quick tool: bounded by --call-timeout (or --device-timeout), not a long engine run


async def run_operation(name: str, request: BaseModel, *, roots: Sequence[Path], limits: Limits, what: str,
                        on_progress: AsyncProgress | None = None, python: str | None = None) -> dict[str, Any]:
    """Operation ``name`` on ``request`` in a fresh child; its result as JSON, or its engine error raised."""
    payload = {"operation": name, "request": request.model_dump(mode="json")}
    env = workers.env_with_roots([str(r) for r in roots])
    try:
        return await workers.run_worker_async(WORKER, payload, timeout=limits.seconds, stall_s=limits.stall_s,
                                              on_progress=on_progress, env=env, python=python, what=what)
    except ChildTimeout as e:
        raise stopped(e, limits, what) from None


def stopped(e: ChildTimeout, limits: Limits, what: str) -> TargetError:
    """The error for a child that was stopped at its limit, saying which limit and how to change it."""
    details = {"stderr_tail": e.stderr_tail[-20:]}
    if e.stalled:
        return TargetError(
            f"{what} used no CPU and printed nothing for {e.limit_s:.0f} s (blocked on I/O: a hung device, adb or "
            "a file system) and was stopped",
            hint="check the device/connection or the files it reads, then retry; the limit is the server's "
            "--stall-timeout", details=details)
    if limits.quick:
        return TargetError(f"{what} did not answer within {e.limit_s:.0f} s and was stopped",
                           hint="check the input (size, device, connection) and retry; the server's per-call limit "
                           "is set with --call-timeout", details=details)
    return TargetError(f"{what} did not finish within {e.limit_s:.0f} s and was stopped",
                       hint="run it as a background job (background=true) or use a smaller model/input", details=details)
