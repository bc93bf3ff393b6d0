"""Field markers the faces read off a request model, so an option is declared once, here.

- :class:`PathRole` on a field says it names a host path: the MCP server resolves and confines it in
  the caller's workspace (``role="exec"``: only the operator's ``--exec-root`` folders; ``role="out"``:
  a fresh output directory claimed for this call) before the request leaves for the child process.
- :class:`Cli` on a field says how the CLI spells it: a positional argument or a flag name (the
  field's ``description`` is the help text), and how to parse the strings typed on the command line.

- :class:`ServerSet` on a field says the MCP server fills it from its own configuration (``adb``, time
  limits, ``force``): it is left out of the tool's input schema and a client can never set it.

All three are plain metadata in ``Annotated[...]``; pydantic ignores them and they never reach a schema.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

PathKind = Literal["file", "dir", "any"]


@dataclass(frozen=True)
class PathRole:
    """The field holds a host path of ``kind``; ``role`` says which folders it may come from. ``as_given``: the
    operation reads the path's own words (generate_llm_qnn.py guesses the model family from its --model string), so
    the server confines the real path but passes on the path as given (links kept, made absolute)."""

    kind: PathKind = "any"
    role: Literal["in", "out", "exec"] = "in"
    as_given: bool = False


@dataclass(frozen=True)
class Cli:
    """How the CLI spells a field: ``flag`` ("--soc", "--mnn-gate/--no-mnn-gate", extra names after it
    such as ``("--serial", "-s")`` in ``names``) or ``positional``; ``parse`` turns the typed string(s) into
    the field's value (e.g. ``NAME=1x3x224x224`` into a dict); ``repeat`` makes the flag repeatable
    (a list of strings for ``parse``; default: list- and dict-valued fields); ``spread``: ``parse`` returns
    several fields' values at once (``--option serial=X`` fills ``serial``, an explicit flag still wins);
    ``default`` is the command line's own default when it differs from the field's (triage reads stdin);
    ``metavar`` names the value in ``--help``; ``hidden`` keeps a field off the command line (an MCP-only
    input such as pasted log text)."""

    flag: str | None = None
    positional: bool = False
    parse: Callable[[Any], Any] | None = None
    hidden: bool = False
    names: tuple[str, ...] = ()
    repeat: bool | None = None
    spread: bool = False
    default: Any = None
    metavar: str | None = None


@dataclass(frozen=True)
class ServerSet:
    """The MCP server sets this field itself (from ``source``, a name in its configuration, or the field's
    default when None); clients never see or set it. The CLI still offers it (per :class:`Cli`)."""

    source: str | None = None


def marker(field: FieldInfo, kind: type[Any]) -> Any | None:
    """The first ``kind`` marker in a field's metadata, or None."""
    for item in field.metadata:
        if isinstance(item, kind):
            return item
    return None


def path_fields(model: type[BaseModel]) -> dict[str, PathRole]:
    """Every field of ``model`` that names a host path, with its role."""
    out: dict[str, PathRole] = {}
    for name, field in model.model_fields.items():
        role = marker(field, PathRole)
        if role is not None:
            out[name] = role
    return out
