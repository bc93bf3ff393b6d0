"""Worker subprocesses: one process per provider configuration, and MNN kept away from our stdout.

Why a subprocess at all:
- ``import MNN`` (and ``import _tools``) write to fd 1 through C stdio, which would corrupt an MCP
  stdio stream or a ``--json`` answer;
- the QNN execution provider shares one backend per process, so a second session with different
  options silently inherits the first one's numerics;
- a segfault or abort inside a native library must not take the caller down.

The worker protocol: a worker is a module with a ``main(request: dict, progress) -> dict`` function.
The request is written to a JSON file and ``python -m qnn_debug.workers.entry <module> <req> <resp>``
is started (through :mod:`qnn_debug.process`, so the one kill rule applies); its stdout goes to a log
file, progress events arrive on its stderr, and the response file holds ``{"result": ...}`` or
``{"error": err.to_dict()}``, which is raised here again as the same class. :func:`run_worker` is the
synchronous runner (the engine); :func:`run_worker_async` the one the MCP server awaits.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import fs, process
from ..errors import TargetError, error_from_dict
from ..progress import NULL_PROGRESS, Progress

ENTRY = "qnn_debug.workers.entry"


def worker_argv(module: str, request_path: Path, response_path: Path, python: str | None = None) -> list[str]:
    """The command line of one worker process (the protocol's only spelling of it)."""
    return [python or sys.executable, "-m", ENTRY, module, str(request_path), str(response_path)]


def run_worker(
    module: str,
    request: dict[str, Any],
    *,
    log_path: Path | None = None,
    timeout: float = 1800.0,
    progress: Progress = NULL_PROGRESS,
    what: str = "worker",
    env: dict[str, str] | None = None,
    stall_s: float | None = None,
    max_rss: int | None = None,
    max_rss_hint: str | None = None,
) -> dict[str, Any]:
    """Run ``module.main(request)`` in a fresh Python process and return its result dict.

    ``max_rss``: the worker stops itself with a :class:`~qnn_debug.errors.MemoryBudgetError` (``max_rss_hint``
    as its hint) once its resident size passes this many bytes.

    Errors raised in the worker as :class:`QnnDebugError` are re-raised here as the same class;
    crashes become :class:`TargetError` naming the signal and the log file.
    """
    with fs.scratch("qnn-debug-worker-") as tmp:
        req_path, resp_path = Path(tmp) / "request.json", Path(tmp) / "response.json"
        if max_rss:
            request = {**request, "_memory_budget": {"bytes": int(max_rss), "hint": max_rss_hint, "what": what}}
        req_path.write_text(json.dumps(request), encoding="utf-8")
        log_file = log_path or Path(tmp) / "worker.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "w", encoding="utf-8", errors="replace") as log:
            try:
                finished = process.run(worker_argv(module, req_path, resp_path), timeout=timeout, env=env,
                                       stdout=log, log=log, on_progress=progress.emit, stall_s=stall_s)
            except process.ChildTimeout as e:
                if e.stalled:
                    raise TargetError(f"{what} used no CPU and printed nothing for {e.limit_s:.0f} s and was stopped",
                                      hint="check the device, connection or files it reads, then retry") from None
                raise TargetError(f"{what} timed out", hint="raise --timeout or use a smaller input") from None
        return answer(resp_path, finished, what=what, log_path=log_file, keep_log=log_path is not None)


async def run_worker_async(
    module: str,
    request: dict[str, Any],
    *,
    timeout: float,
    what: str = "worker",
    on_progress: process.AsyncProgress | None = None,
    env: Mapping[str, str] | None = None,
    stall_s: float | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """:func:`run_worker` for an event loop; raises :class:`~qnn_debug.process.ChildTimeout` for the
    caller to word (a cancelled await kills the worker's group first)."""
    with tempfile.TemporaryDirectory(prefix="qnn-debug-call-") as tmp:
        req_path, resp_path, log_file = Path(tmp) / "request.json", Path(tmp) / "response.json", Path(tmp) / "worker.log"
        req_path.write_text(json.dumps(request), encoding="utf-8")
        with open(log_file, "w", encoding="utf-8", errors="replace") as log:
            finished = await process.run_async(worker_argv(module, req_path, resp_path, python), timeout=timeout,
                                               env=env, stdout=log, on_progress=on_progress, stall_s=stall_s)
        return answer(resp_path, finished, what=what, log_path=log_file, keep_log=False)


def answer(resp_path: Path, finished: process.Finished, *, what: str, log_path: Path, keep_log: bool) -> dict[str, Any]:
    """The worker's result, its typed error raised again, or a :class:`TargetError` for a crash."""
    try:
        response = json.loads(resp_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        tail = _tail(log_path, finished)
        if finished.returncode != 0:
            raise TargetError(
                f"{what} crashed with {finished.status()}",
                hint=f"see {log_path}" if keep_log else f"last output: {tail or '(none)'}",
                details={"log_tail": tail, "returncode": finished.returncode},
            ) from None
        raise TargetError(f"{what} returned no result ({e})", hint=f"last output: {tail or '(none)'}") from None
    if isinstance(response, dict) and isinstance(response.get("error"), dict):
        raise error_from_dict(response["error"])
    if not isinstance(response, dict) or "result" not in response:
        raise TargetError(f"{what} returned a malformed answer", hint="report this as a bug")
    result: dict[str, Any] = response["result"]
    return result


def _tail(path: Path, finished: process.Finished, lines: int = 12) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    got = text.strip().splitlines()[-lines:] or finished.tail(lines)
    return "\n".join(got)


def env_with_roots(roots: list[str] | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a worker confined to ``roots`` (the engine re-checks every file it opens)."""
    env = process.environ() if base is None else dict(base)
    if roots:
        env[fs.ROOTS_ENV] = os.pathsep.join(roots)
    return env
