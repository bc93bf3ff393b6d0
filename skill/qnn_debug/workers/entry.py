"""Entry point of a worker process: ``python -m qnn_debug.workers.entry MODULE REQUEST RESPONSE``.

Runs ``importlib.import_module(MODULE).main(request, progress)`` and writes ``{"result": ...}`` or
``{"error": {...}}`` to RESPONSE. Anything native libraries print goes to our stdout, which the parent
sends to a log file, never to its own stdout.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path

from ..errors import QnnDebugError
from ..progress import Progress, json_lines_sink


def main(argv: list[str]) -> int:
    module_name, req_path, resp_path = argv
    request = json.loads(Path(req_path).read_text(encoding="utf-8"))
    progress = Progress(json_lines_sink(sys.stderr))
    try:
        module = importlib.import_module(module_name)
        result = module.main(request, progress)
        payload = {"result": result}
    except QnnDebugError as e:
        payload = {"error": e.to_dict()}
    except Exception as e:  # a bug or an unexpected library error: keep the trace in the log
        traceback.print_exc()
        payload = {"error": {"type": "TargetError", "message": f"{type(e).__name__}: {e}", "hint": None, "details": {}}}
    sys.stdout.flush()
    Path(resp_path).write_text(json.dumps(payload), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
