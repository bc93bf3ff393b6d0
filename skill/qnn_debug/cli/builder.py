"""A typer command made from an operation's request model, so each option is declared once (in ``qnn_debug.api``).

Every field with a :class:`~qnn_debug.api.fields.Cli` marker becomes an argument or option: its flag, help
(the field's description) and default come from the model; repeatable flags collect strings that the marker's
``parse`` turns into the field's value. The command parses the flags into the request, runs the operation in
this process (:func:`qnn_debug.api.operation` ... ``run``) with progress bars on stderr, and prints the result
with the command's own human rendering or as the one JSON document of ``--json``. Typer reads the parameters
from the function's ``__signature__``.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..api import Operation, operation, parse_request
from ..api.fields import Cli, marker
from ..errors import BadInputError, QnnDebugError
from .app import app
from .common import JSON_OPTION, cli_progress, emit, fail

Human = Callable[[Any, Any], None]  # (result, request) -> prints to stdout


@dataclass(frozen=True)
class JsonFlag:
    """How a command's ``--json`` reads: the typer option, whether a value means "JSON on stdout", and the
    request fields it sets (compare's ``--json FILE`` writes the document to FILE)."""

    option: Any = JSON_OPTION
    annotation: Any = bool
    to_stdout: Callable[[Any], bool] = bool
    fields: Callable[[Any], dict[str, Any]] = lambda value: {}


@dataclass(frozen=True)
class CliField:
    """One field of the request as the command line has it."""

    name: str
    field: FieldInfo
    cli: Cli

    @property
    def repeat(self) -> bool:
        if self.cli.repeat is not None:
            return self.cli.repeat
        return _container(self.field.annotation) is not None

    @property
    def flag(self) -> str:
        return self.cli.flag.split("/")[0] if self.cli.flag else self.name.upper()

    def annotation(self) -> Any:
        if self.repeat:
            return list[str] | None
        base = _base(self.field.annotation)
        if self.cli.parse is not None or base not in (bool, int, float):
            base = str
        return base | None if self.default() is None else base

    def default(self) -> Any:
        if self.cli.default is not None:
            return self.cli.default
        if self.field.is_required():
            return ...
        value = self.field.get_default(call_default_factory=True)
        return None if self.repeat or isinstance(value, dict | list | BaseModel) else value

    def parameter(self) -> inspect.Parameter:
        help_text = self.field.description or ""
        info: Any
        if self.cli.positional:
            info = typer.Argument(self.default(), help=help_text, metavar=self.cli.metavar)
        else:
            decls = [self.cli.flag or f"--{self.name.replace('_', '-')}", *self.cli.names]
            info = typer.Option(self.default(), *decls, help=help_text, metavar=self.cli.metavar)
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=self.annotation())

    def value(self, typed: Any) -> Any:
        """The field's value from what typer handed over (None: leave the request's default)."""
        if typed is None or (self.repeat and not typed):
            return None
        return self.cli.parse(typed) if self.cli.parse is not None else typed


def cli_fields(model: type[BaseModel]) -> list[CliField]:
    """The fields of ``model`` the command line offers, in the model's order."""
    out = []
    for name, field in model.model_fields.items():
        cli = marker(field, Cli)
        if cli is not None and not cli.hidden:
            out.append(CliField(name, field, cli))
    return out


def op_command(name: str, op_name: str, human: Human | None = None, *, help_text: str | None = None,
               json: JsonFlag | None = None, progress: Callable[[Any, bool], bool] = lambda request, as_json: True,
               document: Callable[[Any], Any] = lambda result: result,
               exit_code: Callable[[Any], int] = lambda result: 0, cls: Any = None) -> Callable[..., None]:
    """Register ``qnn-debug NAME``: the flags of operation ``op_name``'s request, then run and print it.

    ``human(result, request)`` prints the human rendering; ``document(result)`` is what ``--json`` prints;
    ``exit_code(result)`` lets a finding (``run``'s failed check) exit 1 after printing."""
    op = operation(op_name)
    fields = cli_fields(op.request)
    flags = {f.name: f for f in fields}
    json_flag = json or JsonFlag()

    def command(**kwargs: Any) -> None:
        json_value = kwargs.pop("json_out")
        as_json = json_flag.to_stdout(json_value)
        try:
            request = _request(op, name, flags, kwargs, json_flag.fields(json_value))
            with cli_progress(enabled=progress(request, as_json)) as bars:
                result = op.run(request, bars)
        except QnnDebugError as e:
            fail(e, as_json)
            return
        emit(document(result), as_json, (lambda: human(result, request)) if human is not None else None)
        code = exit_code(result)
        if code:
            raise typer.Exit(code)

    params = [f.parameter() for f in fields]
    params.append(inspect.Parameter("json_out", inspect.Parameter.KEYWORD_ONLY, default=json_flag.option,
                                    annotation=json_flag.annotation))
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = help_text or op.summary
    command.__name__ = op_name
    app.command(name, cls=cls)(command)
    return command


def _request(op: Operation, command: str, flags: dict[str, CliField], typed: dict[str, Any],
             extra: dict[str, Any]) -> BaseModel:
    payload: dict[str, Any] = dict(extra)
    spread: dict[str, Any] = {}
    for name, value in typed.items():
        f = flags[name]
        parsed = f.value(value)
        if parsed is None:
            continue
        if f.cli.spread:
            spread.update(parsed)
        else:
            payload[name] = parsed
    for key, value in spread.items():  # an explicit flag (--serial) wins over its --option spelling
        payload.setdefault(key, value)
    try:
        return parse_request(op, payload)
    except BadInputError as e:
        raise _flag_error(e, command, flags) from None


def _flag_error(err: BadInputError, command: str, flags: dict[str, CliField]) -> BadInputError:
    """A request field's validation error in the command line's words (the flag and the command as typed, which
    is not always the operation's name: ``op`` runs ``op_lookup``, ``probe`` runs ``probe_device``)."""
    where = str(err.details.get("field", ""))
    f = flags.get(where.split(".")[0])
    if f is None:
        return err
    choices = _choices(f.field)
    if "input" in err.details and choices and err.details.get("problem") in ("literal_error", "enum"):
        return BadInputError(f"unknown {f.flag} {err.details['input']!r}", hint=f"use {' or '.join(choices)}",
                             details=err.details)
    reason = err.message.split(": ", 2)[-1]
    value = f" {err.details['input']!r}" if "input" in err.details else ""
    return BadInputError(f"invalid {f.flag}{value}: {reason}", hint=f"see qnn-debug {command} --help",
                         details=err.details)


def _choices(field: FieldInfo) -> list[str]:
    base = field.annotation
    for arg in (base, *typing.get_args(base)):
        if typing.get_origin(arg) is typing.Literal:
            return [str(a) for a in typing.get_args(arg)]
    return []


def _base(annotation: Any) -> Any:
    """``X | None`` → ``X``; anything else unchanged."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _container(annotation: Any) -> Any:
    origin = typing.get_origin(_base(annotation))
    return origin if origin in (list, dict) else None
