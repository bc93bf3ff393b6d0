"""Turn every failure the model should read into a ``ToolError`` that says what to do next.

The engine's :class:`~qnn_debug.errors.QnnDebugError` (raised in-process, or rebuilt from the CLI's
``{"error", "message", "hint"}`` document) carries a message and a hint; this module is the one place
that formats them, so every tool words its errors the same way.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from qnn_debug.errors import BadInputError, QnnDebugError, TargetError


def tool_error(message: str, next_step: str | None = None) -> ToolError:
    """A ToolError whose text ends with the next step, e.g. ``... Next step: pass a .onnx file.``"""
    text = message.rstrip(".")
    return ToolError(f"{text}. Next step: {next_step.rstrip('.')}." if next_step else f"{text}.")


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


def from_engine(err: QnnDebugError) -> ToolError:
    """Map an engine error (bad input, target failure, device failure) onto a ToolError."""
    default = (
        "fix the argument named in the message and call the tool again"
        if isinstance(err, BadInputError)
        else "read the message above; call triage_log on the run's log if it names an error code"
    )
    return tool_error(err.message.rstrip(".") + details_text(err.details), err.hint or default)


def engine_error_from_document(doc: dict[str, Any], exit_code: int) -> QnnDebugError:
    """Rebuild the engine error a CLI child printed as its ``--json`` document (exit 2 or 3)."""
    cls: type[QnnDebugError] = BadInputError if exit_code == BadInputError.exit_code else TargetError
    err = cls(str(doc.get("message") or "the engine failed"), hint=doc.get("hint"), details=doc.get("details") or {})
    err.kind = str(doc.get("error") or cls.kind)
    return err
