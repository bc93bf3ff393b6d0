"""Entry point of a worker process: ``python -m qnn_debug.workers.entry MODULE REQUEST RESPONSE``.

Runs ``importlib.import_module(MODULE).main(request, progress)`` and writes ``{"result": ...}`` or
``{"error": {...}}`` to RESPONSE. Anything native libraries print goes to our stdout, which the parent
sends to a log file, never to its own stdout. SIGTERM (the parent's kill rule) unwinds like an error,
so scratch folders are removed and the worker's own children are stopped before it exits.

A request may carry ``"_memory_budget": {"bytes": N, "hint": "...", "what": "..."}``: a watchdog thread then reads this
process's resident size every 50 ms and, once it passes N, writes a :class:`MemoryBudgetError` as the
response and ends the process at once (native code holding the main thread cannot be interrupted).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from ..errors import MemoryBudgetError, QnnDebugError, missing_dependency
from ..progress import Progress, json_lines_sink


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _error(kind: str, type_name: str, message: str, hint: str | None) -> dict[str, Any]:
    return {"error": {"error": kind, "type": type_name, "message": message, "hint": hint, "details": {}}}


def rss_bytes() -> int:
    """Resident size of this process now (VmRSS), 0 if unreadable."""
    return status_bytes("VmRSS")


def status_bytes(field: str) -> int:
    """A size field of this process's /proc status (VmRSS now, VmHWM its peak since exec), 0 if unreadable."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _watch_memory(budget: dict[str, Any], module: str, resp_path: str) -> None:
    limit = int(budget["bytes"])
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            rss = rss_bytes()
            if rss > limit:
                gib = 1 << 30
                err = MemoryBudgetError(
                    f"{budget.get('what') or module.rsplit('.', 1)[-1]} reached {rss / gib:.2f} GiB resident, over the memory budget of "
                    f"{limit / gib:.2f} GiB, and was stopped", hint=str(budget.get("hint") or "raise --max-memory"),
                    details={"budget_bytes": limit, "rss_bytes": rss})
                Path(resp_path).write_text(json.dumps({"error": err.to_dict()}), encoding="utf-8")
                sys.stdout.flush()
                os._exit(0)

    threading.Thread(target=watch, name="memory-budget", daemon=True).start()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminated)
    module_name, req_path, resp_path = argv
    request = json.loads(Path(req_path).read_text(encoding="utf-8"))
    budget = request.pop("_memory_budget", None) if isinstance(request, dict) else None
    if budget:
        _watch_memory(budget, module_name, resp_path)
    progress = Progress(json_lines_sink(sys.stderr))
    payload: dict[str, Any]
    try:
        module = importlib.import_module(module_name)
        result = module.main(request, progress)
        payload = {"result": result}
    except QnnDebugError as e:
        payload = {"error": e.to_dict()}
    except RecursionError:
        payload = _error("bad_input", "BadInputError", "the input is nested too deeply", "pass a flatter input")
    except MemoryError:
        payload = _error("bad_input", "BadInputError", "the input needs more memory than this process may use",
                         "pass a smaller input")
    except Exception as e:  # a missing package we name, else a bug or an unexpected library error (trace kept in the log)
        missing = missing_dependency(e) if isinstance(e, ImportError) else None
        if missing is not None:
            payload = {"error": missing.to_dict()}
        else:
            traceback.print_exc()
            payload = _error("target_failure", "TargetError", f"{type(e).__name__}: {e}", None)
    sys.stdout.flush()
    Path(resp_path).write_text(json.dumps(payload), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
