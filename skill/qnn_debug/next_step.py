"""One next step, the same shape everywhere: the MCP tool to call, the CLI line to paste, and why.

Triage, compare, the localisers and the LLM checks all hand the user their next steps as :class:`NextStep`
so an assistant can call the tool and a person can paste the line. ``cli`` runs as printed: every literal
argument is shell-quoted, and a part only the user knows is a quoted shell variable (``"$TESTDIR"``) whose
meaning ``why`` states — never a bare ``<...>`` placeholder, which a shell reads as a redirection.
Only pydantic is imported, so this sits at the bottom of the layers and anything may use it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

PROGRAM = "qnn-debug"


class NextStep(BaseModel):
    """One of our tools to call next: the MCP tool name (None when no tool does it) and the CLI line."""

    tool: str | None = Field(description="the MCP tool that does this step, or null when only the CLI does")
    cli: str = Field(description="a `qnn-debug ...` line that runs as printed (shell-quoted)")
    why: str = Field(description="what the step tells or changes, with the numbers it rests on")


@dataclass(frozen=True)
class Var:
    """A part of a command only the user knows: printed as ``"$NAME"``, explained in the step's ``why``."""

    name: str
    means: str

    def shell(self) -> str:
        return f'"${self.name}"'


Arg = str | Path | Var


def command_line(args: Sequence[Arg]) -> str:
    """``qnn-debug ARGS`` with literal arguments shell-quoted and variables as ``"$NAME"``."""
    return " ".join([PROGRAM, *(a.shell() if isinstance(a, Var) else shlex.quote(str(a)) for a in args)])


def step(tool: str | None, args: Sequence[Arg], why: str) -> NextStep:
    """A step running ``qnn-debug ARGS``; ``why`` gains what to set for each variable in ``args``."""
    variables = list(dict.fromkeys(a for a in args if isinstance(a, Var)))
    if variables:
        settings = "; ".join(f"set {v.name} to {v.means}" for v in variables)
        why = f"{why.rstrip('.')} ({settings})."
    return NextStep(tool=tool, cli=command_line(args), why=why)
