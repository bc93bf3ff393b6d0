"""The child side of :mod:`.child_call`: run one pickled call and send back its pickled answer.

Started as ``python -m qnn_debug_mcp.child_worker``. The request (function, arguments) arrives on stdin;
the answer leaves on a private copy of fd 1 while fd 1 itself points at stderr, so stray native output
(``import MNN`` prints there) can never corrupt the answer. The engine's confinement roots arrive in
the environment (``QNN_DEBUG_ROOTS``), so every file the call opens is checked here too.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any


def _answer(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    from qnn_debug.errors import QnnDebugError

    try:
        return "ok", fn(*args, **kwargs)
    except QnnDebugError as e:
        return "error", {**e.to_dict(), "exit_code": e.exit_code}
    except RecursionError:
        return "error", {"error": "bad_input", "message": "the input is nested too deeply", "hint": "pass a flatter input",
                         "details": {}, "exit_code": 2}
    except MemoryError:
        return "error", {"error": "bad_input", "message": "the input needs more memory than the server allows",
                         "hint": "pass a smaller input", "details": {}, "exit_code": 2}


def main() -> None:
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed from here on goes to stderr, never into the answer
    request = sys.stdin.buffer.read()
    fn, args, kwargs = pickle.loads(request)  # our own parent wrote it
    status, value = _answer(fn, args, kwargs)
    with os.fdopen(answer_fd, "wb") as out:
        out.write(pickle.dumps((status, value), protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    main()
