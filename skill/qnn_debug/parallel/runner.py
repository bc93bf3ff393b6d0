"""How a worker process (a Ray worker, or the serial executor's child) runs one job: the function by name, the
job's environment (the allowed roots) applied, errors as data (a typed error crosses processes as its dict)."""

from __future__ import annotations

import importlib
import os
import time
import traceback
from typing import Any

from ..errors import QnnDebugError, flatten_message


def run_job(fn: str, args: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """``{"result": ..., "pid": ..., "seconds": ...}`` or ``{"error": QnnDebugError.to_dict()}``."""
    os.environ.update(env)
    t0 = time.monotonic()
    module, _, name = fn.partition(":")
    try:
        result = getattr(importlib.import_module(module), name)(args)
    except QnnDebugError as e:
        return {"error": e.to_dict(), "pid": os.getpid()}
    except Exception as e:  # a bug or a library error: typed for the caller, the trace in the worker's log
        traceback.print_exc()
        err = {"error": "target", "type": "TargetError", "message": f"{type(e).__name__}: {flatten_message(str(e))}",
               "hint": "see the worker's log; report this as a bug if it persists", "details": {}}
        return {"error": err, "pid": os.getpid()}
    return {"result": result, "pid": os.getpid(), "seconds": round(time.monotonic() - t0, 3)}
