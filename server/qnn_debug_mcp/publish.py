"""Publish an engine operation (:mod:`qnn_debug.api`) as an MCP tool, the same way for every tool.

The tool's arguments are the operation's request model: its signature is built from
``model_fields`` (minus the server-set ones), so each field's type, limits and description reach the
input schema exactly as the engine declares them, never retyped here; long tools add ``background``
(and compare/diagnose ``top``). The output schema is the result model (quick tools) or
``LongToolAnswer[Result]`` (long tools). A call confines the request's paths (:mod:`.request_paths`),
runs the operation in a child (:mod:`.engine_child`) and answers with the typed result, or with the
engine's error under its own class name (:func:`.errors.error_result`).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field
from pydantic_core import PydanticUndefined

from qnn_debug.api import Operation, operation, parse_request
from qnn_debug.api.fields import ServerSet, marker
from qnn_debug.errors import QnnDebugError

from .args import Background, ClientRoots
from .config import ServerConfig
from .engine_child import Limits, run_operation
from .errors import Refusal, error_result
from .long_runs import Summarize, run_long
from .models import LongToolAnswer
from .request_paths import confine, needs_workspace, server_values
from .tool_context import app_state, child_roots, relay, respond
from .workspace import Workspace

Top = Annotated[int, Field(ge=1, le=200, description="how many tensor rows to return")]
DEFAULT_TOP = 15
RESERVED = ("ctx", "roots", "background", "top")


@dataclass(frozen=True)
class OpTool:
    """How one operation appears as a tool: its name and words, and the few things only the face decides."""

    operation: str
    name: str
    title: str
    annotations: ToolAnnotations
    description: str
    summarize: Callable[[Any], str]
    """Quick tools: the answer model -> one line; long tools: the result JSON -> one line."""
    long: bool = False
    auto_background: bool = False
    """Long tools: run as a job by default (waiting --background-wait first)."""
    top: bool = False
    """Long tools: add ``top`` and trim the result with ``transform(result, top)``."""
    transform: Callable[[dict[str, Any], int], dict[str, Any]] | None = None
    answer: type[BaseModel] | None = None
    """Quick tools: the published output model when it adds to the result model (default: the result model)."""
    shape: Callable[[BaseModel], BaseModel] | None = None
    """Quick tools: result model -> answer model."""
    prepare: Callable[[BaseModel, Workspace], BaseModel] | None = None
    """A default only the server can know (e.g. the cases file in the workspace), after confinement."""
    limit: Callable[[ServerConfig, BaseModel], float] | None = None
    """Quick tools: the per-call limit (default --call-timeout)."""
    job_title: Callable[[BaseModel], str] | None = None
    """Long tools: the job's title, e.g. ``baseline of cnn.onnx``."""
    require: tuple[str, ...] = ()
    """Fields a client must give although the engine has a default (an edit a model should never make blind)."""


def publish(server: MCPServer, spec: OpTool) -> None:
    """Register ``spec`` as a tool whose signature, input schema and output schema come from the operation."""
    op = operation(spec.operation)
    answer: Any = LongToolAnswer[op.result] if spec.long else (spec.answer or op.result)  # type: ignore[name-defined]
    with_roots = needs_workspace(op.request)

    async def handler(**kwargs: Any) -> CallToolResult:
        ctx: Context = kwargs.pop("ctx")
        roots = kwargs.pop("roots", None)
        background = kwargs.pop("background", None)
        top = kwargs.pop("top", DEFAULT_TOP)
        return await call(ctx, spec, op, roots, kwargs, background=background, top=top)

    params = signature_parameters(op.request, with_roots=with_roots, long=spec.long, top=spec.top,
                                  require=spec.require)
    handler.__signature__ = inspect.Signature(params, return_annotation=Annotated[CallToolResult, answer])  # type: ignore[attr-defined]
    handler.__annotations__ = {p.name: p.annotation for p in params} | {"return": Annotated[CallToolResult, answer]}
    handler.__name__ = handler.__qualname__ = spec.name
    server.tool(name=spec.name, title=spec.title, annotations=spec.annotations,
                description=inspect.cleandoc(spec.description))(handler)


def signature_parameters(model: type[BaseModel], *, with_roots: bool, long: bool, top: bool,
                         require: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """``ctx``, ``roots`` (when the request names workspace paths), one parameter per client-set field of
    ``model`` (its annotation carries the field's own FieldInfo: type, limits, description), then
    ``background``/``top`` for long tools."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("ctx", kw, annotation=Context)]
    if with_roots:
        params.append(inspect.Parameter("roots", kw, default=None, annotation=ClientRoots))
    for name, field in model.model_fields.items():
        if marker(field, ServerSet) is not None:
            continue
        if name in RESERVED:
            raise ValueError(f"request field {name!r} of {model.__name__} collides with a tool parameter")
        info = copy.copy(field)
        info.default, info.default_factory = PydanticUndefined, None
        required = field.is_required() or name in require
        default = inspect.Parameter.empty if required else field.get_default(call_default_factory=True)
        params.append(inspect.Parameter(name, kw, default=default, annotation=Annotated[field.annotation, info]))
    if long:
        params.append(inspect.Parameter("background", kw, default=None, annotation=Background))
    if top:
        params.append(inspect.Parameter("top", kw, default=DEFAULT_TOP, annotation=Top))
    return params


async def call(ctx: Context, spec: OpTool, op: Operation, roots: Any, arguments: dict[str, Any], *,
               background: bool | None, top: int) -> CallToolResult:
    """One tool call: request model in, typed answer (or the engine's typed error) out."""
    from .tool_context import workspace

    cfg = app_state(ctx).config
    try:
        ws = workspace(ctx, roots) if needs_workspace(op.request) else Workspace(cfg.roots)
        request = parse_request(op, {**arguments, **server_values(cfg, op.request)})
        request = confine(ctx, ws, request)
        if spec.prepare is not None:
            request = spec.prepare(request, ws)
    except QnnDebugError as e:
        return error_result(e)
    except Refusal as e:  # a path outside the workspace, a taken output folder: bad input like the engine's
        return error_result(e.as_bad_input())
    confined_to = child_roots(ctx, ws)
    if not spec.long:
        limit = spec.limit(cfg, request) if spec.limit else cfg.quick_timeout_s
        try:
            data = await run_operation(op.name, request, roots=confined_to, limits=Limits(limit, quick=True),
                                       what=spec.name, on_progress=relay(ctx), python=cfg.python)
        except QnnDebugError as e:
            return error_result(e)
        result = op.result.model_validate(data)
        shaped = spec.shape(result) if spec.shape else result
        return respond(shaped, spec.summarize(shaped))

    limits = Limits(cfg.long_timeout_s, stall_s=cfg.stall_timeout_s)
    transform = spec.transform

    async def work(on_progress: Any) -> dict[str, Any]:
        data = await run_operation(op.name, request, roots=confined_to, limits=limits, what=spec.name,
                                   on_progress=on_progress, python=cfg.python)
        return transform(data, top) if transform is not None else data

    title = spec.job_title(request) if spec.job_title else spec.title
    summarize: Summarize = spec.summarize
    return await run_long(ctx, tool=spec.name, title=title, work=work, background=background,
                          auto_background=spec.auto_background, summarize=summarize)


def model_stem(request: BaseModel, field: str = "model") -> str:
    """The file name a request's path field names, for job titles."""
    value = getattr(request, field, None)
    return Path(value).name if isinstance(value, str) else "?"

