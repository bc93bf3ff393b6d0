"""Prepare a request model for the engine: confine its paths to the caller's workspace, fill server-set fields.

The request model says which fields are host paths (:class:`~qnn_debug.api.fields.PathRole`) and which
the server fills itself (:class:`~qnn_debug.api.fields.ServerSet`); nothing here names an option:
- ``role="in"``: resolved inside the workspace (client roots narrowed to the operator's ``--root``);
- ``role="exec"``: native code (an MNN build, MNN2QNNModel, a QNN SDK): only from the operator's
  ``--exec-root`` folders (in stdio mode also the ``--root`` folders), never from a client's roots;
- ``role="out"``: a fresh output folder claimed for this call (:func:`.tool_context.new_output`), by
  default named by ``request.default_out()``;
- nested models (target options) are walked the same way.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel

from qnn_debug.api.fields import PathRole, ServerSet, marker, path_fields

from .config import ServerConfig
from .errors import tool_error
from .tool_context import exec_workspace, new_output
from .workspace import Workspace

CONFIG_SOURCES = {"adb": "adb", "device_timeout": "device_timeout_s"}
"""``ServerSet(source)`` names -> the :class:`ServerConfig` setting that fills them (others keep their default)."""


def server_values(config: ServerConfig, model: type[BaseModel]) -> dict[str, Any]:
    """Values of ``model``'s server-set fields from the operator's configuration (unset ones keep their default)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        mark = marker(field, ServerSet)
        setting = CONFIG_SOURCES.get(mark.source or name) if mark is not None else None
        value = getattr(config, setting) if setting else None
        if value is not None:
            out[name] = value
    return out


def needs_workspace(model: type[BaseModel]) -> bool:
    """Whether a request of ``model`` names any workspace path (so the tool asks the client for its roots)."""
    for field in model.model_fields.values():
        role = marker(field, PathRole)
        if role is not None and role.role != "exec":
            return True
        nested = _model_of(field.annotation)
        if nested is not None and needs_workspace(nested):
            return True
    return False


def confine(ctx: Context, ws: Workspace, request: BaseModel) -> BaseModel:
    """``request`` with every path field resolved and confined, and its output folder claimed."""
    request = _confine_inputs(ctx, ws, request, prefix="")
    outs = [n for n, role in path_fields(type(request)).items() if role.role == "out"]
    if not outs:
        return request
    default = request.default_out()  # type: ignore[attr-defined]
    updates: dict[str, Any] = {}
    for name in outs:
        raw = getattr(request, name)
        if raw is None and default is None:
            continue
        group, leaf = default or ("runs", name)
        updates[name] = str(new_output(ctx, ws, raw, group=group, leaf=leaf, what=name))
    return request.model_copy(update=updates)


def _confine_inputs(ctx: Context, ws: Workspace, request: BaseModel, *, prefix: str) -> BaseModel:
    updates: dict[str, Any] = {}
    for name, field in type(request).model_fields.items():
        value = getattr(request, name)
        if value is None:
            continue
        role = marker(field, PathRole)
        what = f"{prefix}{name}"
        if role is not None and role.role != "out":
            updates[name] = _resolve(ctx, ws, value, role, what)
        elif isinstance(value, BaseModel):
            updates[name] = _confine_inputs(ctx, ws, value, prefix=f"{what}.")
    return request.model_copy(update=updates) if updates else request


def _resolve(ctx: Context, ws: Workspace, value: Any, role: PathRole, what: str) -> Any:
    if isinstance(value, list):
        return [_resolve(ctx, ws, v, role, what) for v in value]
    if not isinstance(value, str):
        return value
    where = ws
    if role.role == "exec":
        found = exec_workspace(ctx)
        if found is None:
            raise tool_error(f"{what} names native code, which this server only runs from folders its operator "
                             "configured, and none is configured",
                             "ask the operator to restart the server with --exec-root DIR for your MNN/QNN builds")
        where = found
    return str(where.resolve(value, what=what, kind=role.kind, keep_links=role.as_given))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X`` or ``X | None``, if any."""
    from typing import get_args

    candidates = [annotation, *get_args(annotation)]
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None
