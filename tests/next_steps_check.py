"""Checks every printed next step must pass: structured, runnable as printed, naming real tools and files."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import typer

from qnn_debug.cli import app

REPO = Path(__file__).resolve().parents[1]
BARE = re.compile(r"<[A-Za-z][^<>`]*>")


@cache
def mcp_tools() -> frozenset[str]:
    from qnn_debug_mcp.app import build_server

    return frozenset(t.name for t in anyio.run(build_server().list_tools))


@cache
def has_help(command: str) -> bool:
    """``python -m qnn_debug COMMAND --help`` exits 0: the command exists as the user would type it."""
    done = subprocess.run([sys.executable, "-m", "qnn_debug", command, "--help"], capture_output=True, timeout=120)
    return done.returncode == 0


def as_dict(step: Any) -> dict[str, Any]:
    return step if isinstance(step, dict) else step.model_dump()


def argv(step: Any) -> list[str]:
    return shlex.split(as_dict(step)["cli"])


def check_steps(steps: list[Any], *, run_help: bool = False) -> None:
    """Each step has tool/cli/why; cli parses, starts with qnn-debug, names a real command with real options
    and no bare <...>; tool is an MCP tool (or null); every playbook named in why is a file."""
    group = typer.main.get_command(app)
    assert steps
    for raw in steps:
        s = as_dict(raw)
        assert set(s) == {"tool", "cli", "why"}, s
        assert s["why"].strip() and not re.search(r"\[[a-z_]+\]", s["why"]), s  # no tool names in brackets
        assert not BARE.search(s["cli"]) and not BARE.search(s["why"]), s
        args = shlex.split(s["cli"])
        assert args[0] == "qnn-debug", s
        command = group.commands.get(args[1])  # type: ignore[attr-defined]
        assert command is not None, s
        if run_help:
            assert has_help(args[1]), s
        opts = {o for p in command.params for o in [*p.opts, *getattr(p, "secondary_opts", [])]}
        for token in args[2:]:
            if token.startswith("--"):
                assert token.split("=")[0] in opts, (s, token)
        assert s["tool"] is None or s["tool"] in mcp_tools(), s
        for book in re.findall(r"playbooks/[\w-]+\.md", s["why"]):
            assert (REPO / book).is_file(), book


def text(steps: list[Any]) -> str:
    """Everything the steps say (lines and reasons), for content checks."""
    return " ".join(f"{as_dict(s)['cli']} {as_dict(s)['why']}" for s in steps)
