"""Worker subprocesses: one process per provider configuration, and MNN kept away from our stdout.

Why a subprocess at all:
- ``import MNN`` (and ``import _tools``) write to fd 1 through C stdio, which would corrupt an MCP
  stdio stream or a ``--json`` answer;
- the QNN execution provider shares one backend per process, so a second session with different
  options silently inherits the first one's numerics;
- a segfault or abort inside a native library must not take the caller down.

A worker is a module with a ``main(request: dict) -> dict`` function. :func:`run_worker` writes the
request to a JSON file, starts ``python -m qnn_debug.workers.entry <module> <req> <resp>``, captures
stdout/stderr to a log file, enforces a timeout and returns the response dict.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import fs
from ..errors import TargetError, error_from_dict
from ..progress import NULL_PROGRESS, PROGRESS_PREFIX, Progress, ProgressEvent


def run_worker(
    module: str,
    request: dict[str, Any],
    *,
    log_path: Path | None = None,
    timeout: float = 1800.0,
    progress: Progress = NULL_PROGRESS,
    what: str = "worker",
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``module.main(request)`` in a fresh Python process and return its result dict.

    Errors raised in the worker as :class:`QnnDebugError` are re-raised here with the same type name
    mapped onto our classes; crashes become :class:`TargetError` naming the signal and the log file.
    """
    with fs.scratch("qnn-debug-worker-") as tmp:
        req_path = Path(tmp) / "request.json"
        resp_path = Path(tmp) / "response.json"
        req_path.write_text(json.dumps(request), encoding="utf-8")
        log_file = log_path or Path(tmp) / "worker.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "qnn_debug.workers.entry", module, str(req_path), str(resp_path)]
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        with open(log_file, "w", encoding="utf-8", errors="replace") as log, subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env,
        ) as proc:
            assert proc.stderr is not None
            deadline = time.monotonic() + timeout
            try:
                _pump_stderr(proc, log, progress, deadline)
            except BaseException:
                _kill(proc)
                raise
            rc = proc.wait()
        if rc != 0 and not resp_path.exists():
            tail = _tail(log_file)
            sig = f" (killed by signal {signal.Signals(-rc).name})" if rc < 0 and -rc in signal.Signals._value2member_map_ else ""
            raise TargetError(
                f"{what} crashed with exit status {rc}{sig}",
                hint=f"see {log_file}" if log_path else f"last output: {tail}",
                details={"log_tail": tail, "returncode": rc},
            )
        try:
            response = json.loads(resp_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise TargetError(f"{what} returned no result ({e})", hint=f"last output: {_tail(log_file)}") from None
    if "error" in response:
        raise error_from_dict(response["error"])
    result: dict[str, Any] = response["result"]
    return result


def _pump_stderr(proc: subprocess.Popen[str], log: Any, progress: Progress, deadline: float) -> None:
    """Forward progress lines from the worker's stderr, copy everything else to the log, honour the timeout."""
    import selectors

    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    buf = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill(proc)
            raise TargetError("worker timed out", hint="raise --timeout or use a smaller input")
        if not sel.select(timeout=min(remaining, 1.0)):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stderr.fileno(), 65536).decode("utf-8", "replace")
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            if line.startswith(PROGRESS_PREFIX):
                try:
                    progress.emit(ProgressEvent(**json.loads(line[len(PROGRESS_PREFIX) :])))
                except (TypeError, ValueError):
                    log.write(line + "\n")
            else:
                log.write(line + "\n")
    if buf:
        log.write(buf)
    log.flush()


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
