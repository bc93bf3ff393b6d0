"""Entry point of a worker process: ``python -m qnn_debug.workers.entry MODULE REQUEST RESPONSE``.

Runs ``importlib.import_module(MODULE).main(request, progress)`` and writes ``{"result": ...}`` or
``{"error": {...}}`` to RESPONSE. Anything native libraries print goes to our stdout, which the parent
sends to a log file, never to its own stdout. SIGTERM (the parent's kill rule) unwinds like an error,
so scratch folders are removed and the worker's own children are stopped before it exits.
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from ..errors import QnnDebugError, missing_dependency
from ..progress import Progress, json_lines_sink


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _error(kind: str, type_name: str, message: str, hint: str | None) -> dict[str, Any]:
    return {"error": {"error": kind, "type": type_name, "message": message, "hint": hint, "details": {}}}


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminated)
    module_name, req_path, resp_path = argv
    request = json.loads(Path(req_path).read_text(encoding="utf-8"))
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
