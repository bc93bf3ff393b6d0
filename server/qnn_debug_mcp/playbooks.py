"""Find the playbooks: the repository's ``playbooks/`` folder, or the copy shipped in the wheel.

A wheel install has ``qnn_debug/playbooks`` (pyproject's force-include); a source checkout (and an
installed skill folder, which is a copy of the repository) has ``<repo>/playbooks``.
"""

from __future__ import annotations

import re
from pathlib import Path

import qnn_debug

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def playbook_dirs() -> list[Path]:
    """Folders that may hold the playbooks: the wheel's copy first, then a source checkout's."""
    here = Path(__file__).resolve()
    shipped = Path(qnn_debug.__file__).resolve().parent / "playbooks"
    repo = here.parents[2]
    checkout = repo / "playbooks" if (repo / "pyproject.toml").is_file() and here.parent.parent.name == "server" else None
    return [c for c in (shipped, checkout) if c is not None and c.is_dir()]


def playbook_files() -> dict[str, Path]:
    """``name`` (file stem) → file, from the first folder that has any Markdown playbooks."""
    for folder in playbook_dirs():
        found = {p.stem: p for p in sorted(folder.glob("*.md")) if NAME.match(p.stem)}
        if found:
            return found
    return {}


def first_heading(path: Path) -> str:
    """The playbook's title (its first ``# `` line), for resource listings."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("# "):
                    return line[2:].strip()
    except OSError:
        pass
    return path.stem


def playbook_uri(reference: str | None) -> str | None:
    """``playbooks/error-codes.md#1002-...`` (how the engine cites playbooks) → ``playbook://error-codes``."""
    if not reference:
        return None
    file_part = reference.split("#", 1)[0]
    stem = Path(file_part).stem
    return f"playbook://{stem}" if NAME.match(stem) else None
