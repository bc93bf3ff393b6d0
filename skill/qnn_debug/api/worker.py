"""Worker side of an operation run in a child process (started through :mod:`qnn_debug.workers.entry`).

The request is ``{"operation": NAME, "request": {...}}``; the answer is the result model as JSON. An
engine error travels back through the worker protocol as ``{"error": err.to_dict()}`` (class name,
kind, message, hint, details), so the parent re-raises the same class; progress events go to stderr.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadInputError
from ..progress import Progress
from . import operation, parse_request


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    name, payload = request.get("operation"), request.get("request")
    if not isinstance(name, str) or not isinstance(payload, dict):
        raise BadInputError("an operation request needs an 'operation' name and a 'request' object",
                            hint="send {\"operation\": NAME, \"request\": {...}}")
    op = operation(name)
    result = op.run(parse_request(op, payload), progress)
    data: dict[str, Any] = result.model_dump(mode="json")
    return data
