r"""Turn every failure the model should read into an error answer that says what to do next.

The engine's :class:`~qnn_debug.errors.QnnDebugError` arrives from the worker with its class, message,
hint and details (:func:`qnn_debug.errors.error_from_dict`); :func:`error_result` answers with text
that starts with the class name (``UnsupportedOnTargetError: ... Next step: ...``) and the same
fields as structured content. The server's own refusals (a path outside the workspace) are
:class:`Refusal`\ s from :func:`tool_error`: a ``ToolError`` that also keeps its message and next step, so a
tool that publishes an operation answers them like the engine's bad input (``BadInputError: ...``).
This module is the one place that formats both.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from qnn_debug.errors import BadInputError, QnnDebugError


class Refusal(ToolError):
    """The server refused an argument (before any engine work): its text ends with the next step."""

    def __init__(self, message: str, next_step: str | None = None):
        text = message.rstrip(".")
        super().__init__(f"{text}. Next step: {next_step.rstrip('.')}." if next_step else f"{text}.")
        self.message, self.next_step = message, next_step

    def as_bad_input(self) -> BadInputError:
        return BadInputError(self.message, hint=self.next_step)


def tool_error(message: str, next_step: str | None = None) -> Refusal:
    """A ToolError whose text ends with the next step, e.g. ``... Next step: pass a .onnx file.``"""
    return Refusal(message, next_step)


MAX_DETAIL_ITEMS = 20
MAX_DETAIL_CHARS = 800


def compact_details(details: dict[str, Any] | None) -> dict[str, Any]:
    """The parts of an engine error's ``details`` a model can act on (QNN's own reasons, the rejected
    nodes), bounded: a real model can reject hundreds of nodes."""
    out: dict[str, Any] = {}
    for key in ("reasons", "nodes"):
        value = (details or {}).get(key)
        if isinstance(value, list) and value:
            out[key] = value[:MAX_DETAIL_ITEMS]
            if len(value) > MAX_DETAIL_ITEMS:
                out[f"{key}_total"] = len(value)
    return out


def details_text(details: dict[str, Any] | None) -> str:
    """QNN's own words from ``details.reasons`` as one bounded line, so the model reads them in the error text
    itself (the engine's hints point at ``details.reasons``, which a ToolError has no room for)."""
    reasons = (details or {}).get("reasons")
    if not isinstance(reasons, list) or not reasons:
        return ""
    text = " | ".join(" ".join(str(r).split()) for r in reasons[:5])
    if len(text) > MAX_DETAIL_CHARS:
        text = text[: MAX_DETAIL_CHARS - 1] + "…"
    return f" (details.reasons, QNN's own words: {text})"


def engine_text(type_name: str, message: str, hint: str | None, details: dict[str, Any] | None, *,
                bad_input: bool = False) -> str:
    """``Class: message (QNN's reasons). Next step: hint.``"""
    default = ("fix the argument named in the message and call the tool again" if bad_input
               else "read the message above; call triage_log on the run's log if it names an error code")
    step = (hint or default).rstrip(".")
    return f"{type_name}: {message.rstrip('.')}{details_text(details)}. Next step: {step}."


def error_result(err: QnnDebugError, *, prefix: str = "") -> CallToolResult:
    """An engine error as the tool's answer: ``is_error``, text that starts with the error's class name,
    and ``{"error": {type, kind, message, hint, details}}`` as structured content for programs."""
    message = f"{prefix}{err.message}"
    text = engine_text(type(err).__name__, message, err.hint, err.details, bad_input=isinstance(err, BadInputError))
    info = {"type": type(err).__name__, "kind": err.kind, "message": message, "hint": err.hint,
            "details": compact_details(err.details) or None}
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"error": info},
                          is_error=True)


def engine_error(type_name: str, kind: str, message: str, hint: str | None,
                 details: dict[str, Any] | None = None) -> QnnDebugError:
    """Rebuild an engine error kept as plain fields (a finished job's), with its class."""
    from qnn_debug.errors import error_from_dict

    return error_from_dict({"type": type_name, "error": kind, "message": message, "hint": hint,
                            "details": details or {}})
