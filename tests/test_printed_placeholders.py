"""Shell lines we document as runnable carry no bare ``<…>`` placeholder (in ``sh`` that is a redirection):
variable parts are quoted shell variables with a sentence saying what to set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BARE = re.compile(r"<[A-Za-z][^<>`]*>")
COMMANDS = ("qnn-debug", "python", "pip", "uvx", "claude", "adb", "~/.venvs", ".venv/", "npx", "bash", "sh ")


def shell_lines(text: str) -> list[str]:
    """Lines of ```bash/sh fenced blocks, and inline code spans that start with a command."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced and line.strip()[3:].strip() in ("bash", "sh", "shell", "console")
            continue
        if fenced:
            lines.append(line.split("  #")[0])
    prose = re.sub(r"```.*?```", "", text, flags=re.S).replace("\n   ", " ")
    for span in re.findall(r"`([^`]+)`", prose):
        if span.lstrip().startswith(COMMANDS):
            lines.append(span)
    return lines


@pytest.mark.parametrize("doc", ["SKILL.md"])
def test_documented_shell_lines_have_no_bare_placeholders(doc: str) -> None:
    bad = [line for line in shell_lines((REPO / doc).read_text(encoding="utf-8")) if BARE.search(line)]
    assert not bad, bad


def test_the_detector_finds_a_bare_placeholder() -> None:
    assert shell_lines("```bash\npip install <this folder>\n```\n") == ["pip install <this folder>"]
    assert BARE.search(shell_lines("run `qnn-debug baseline MODEL --inputs <dir>` now")[0])
    assert not BARE.search('qnn-debug-mcp --root "$PROJECT_DIR"')


@pytest.mark.parametrize("log,expected", [
    (["Validation FAILED { name: conv_1, type: Conv2d }", "REASON : bad dims"], "`qnn-debug op Conv2d`"),
    (["Validation FAILED { name: n, type: Weird;rm }"], "`qnn-debug op 'Weird;rm'`"),
    (["Unsupported nodes: none named"], '`qnn-debug op "$OP_TYPE"` (set OP_TYPE'),
])
def test_unsupported_node_hints_are_runnable(log: list[str], expected: str) -> None:
    from qnn_debug.targets.qnn_ep import _creation_error

    err = _creation_error("Node assigned to the default CPU EP", log)
    assert err.hint and expected in err.hint and not BARE.search(err.hint), err.hint
