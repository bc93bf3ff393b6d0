"""The engine's public operations: one typed request and one typed result per operation.

Both faces use this module and nothing else of the engine's insides to *run* work:
- the CLI (``qnn_debug.cli``) parses its flags into an operation's request model, calls
  :func:`execute` and prints the result model;
- the MCP server (``qnn_debug_mcp``) publishes the request model as the tool's input schema and the
  result model as its output schema, sends the serialized request to a child process
  (:mod:`qnn_debug.api.worker`, over the worker protocol of :mod:`qnn_debug.workers`) and gets the
  serialized result back, or the engine's typed error with its class, message and hint.

An operation's code is imported only when it runs, so importing this module (and every request and
result model) stays cheap: the MCP server imports it at start-up to build its tool list.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import BadInputError
from ..progress import NULL_PROGRESS, Progress

Runner = Callable[[Any, Progress], BaseModel]


@dataclass(frozen=True)
class Operation:
    """One public operation: its name, request and result models, and where its code lives."""

    name: str
    request: type[BaseModel]
    result: type[BaseModel]
    runner: str  # "module:function", imported lazily; called as function(request, progress) -> result
    long: bool = False  # may run for minutes: faces run it in a child process / as a job
    summary: str = ""

    def run(self, request: BaseModel, progress: Progress = NULL_PROGRESS) -> BaseModel:
        module, _, function = self.runner.partition(":")
        fn: Runner = getattr(importlib.import_module(module), function)
        result = fn(request, progress)
        if not isinstance(result, self.result):
            result = self.result.model_validate(result)
        return result


OPERATIONS: dict[str, Operation] = {}


def register(operation: Operation) -> Operation:
    OPERATIONS[operation.name] = operation
    return operation


def operation(name: str) -> Operation:
    """The operation called ``name``, or a typed error listing the ones there are."""
    _load_registry()
    op = OPERATIONS.get(name)
    if op is None:
        raise BadInputError(f"unknown operation {name!r}", hint=f"one of: {', '.join(sorted(OPERATIONS))}")
    return op


def all_operations() -> list[Operation]:
    """Every registered operation, in registration order (not named `operations`: that is the registry submodule)."""
    _load_registry()
    return list(OPERATIONS.values())


def parse_request(op: Operation, data: BaseModel | Mapping[str, Any]) -> BaseModel:
    """``data`` as ``op``'s request model; a field that does not validate is a :class:`BadInputError` naming it."""
    if isinstance(data, op.request):
        return data
    raw = data.model_dump(mode="json") if isinstance(data, BaseModel) else dict(data)
    try:
        return op.request.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "request"
        value = first.get("input")
        details: dict[str, Any] = {"field": where, "problem": first.get("type", "")}
        if isinstance(value, str | int | float | bool):
            details["input"] = value
        raise BadInputError(f"{op.name}: {where}: {first.get('msg', 'invalid value')}",
                            hint=f"see the {op.name} request's fields ({len(e.errors())} problem(s) in all)",
                            details=details) from None


def execute(name: str, request: BaseModel | Mapping[str, Any], progress: Progress = NULL_PROGRESS) -> BaseModel:
    """Run operation ``name`` in this process and return its result model."""
    op = operation(name)
    return op.run(parse_request(op, request), progress)


def _load_registry() -> None:
    """The operations register themselves in :mod:`.operations` (light: models only)."""
    if not OPERATIONS:
        importlib.import_module(f"{__name__}.operations")
