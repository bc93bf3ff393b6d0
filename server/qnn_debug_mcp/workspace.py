"""Confine every file argument to the workspace roots.

The roots are the client's (MCP ``roots/list``) when it offers any, otherwise the ``--root`` flags
given at start-up (default: the current directory). A path is accepted only if, after resolving
symlinks, it lies inside a root. ``..`` components are refused outright, even when they would land
back inside, so a model never learns to build paths that way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import unquote, urlparse

from .errors import tool_error

MAX_PATH_CHARS = 4096
PathKind = Literal["file", "dir", "any"]


def roots_from_uris(uris: Iterable[str]) -> list[Path]:
    """Local directories named by ``file://`` root URIs; other schemes cannot hold our files."""
    out: list[Path] = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme == "file" and parsed.path:
            out.append(Path(unquote(parsed.path)))
    return out


class Workspace:
    """The directories a tool may read from and write to during one call."""

    def __init__(self, roots: Sequence[Path]):
        resolved = [Path(os.path.realpath(r)) for r in roots]
        if not resolved:
            raise ValueError("a workspace needs at least one root")
        self.roots: list[Path] = list(dict.fromkeys(resolved))

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def resolve(self, raw: str, *, what: str, kind: PathKind = "any", must_exist: bool = True) -> Path:
        """The real path for a user-supplied path, or a ToolError saying why it is refused.

        Relative paths are looked up under each root in turn (first existing wins; for a new
        output, the first root).
        """
        if not raw or not raw.strip():
            raise tool_error(f"{what} is empty", f"pass a path inside the workspace ({self.describe()})")
        if "\x00" in raw or len(raw) > MAX_PATH_CHARS:
            raise tool_error(f"{what} is not a usable path", "pass a normal file path")
        if ".." in PurePosixPath(raw.replace("\\", "/")).parts:
            raise tool_error(
                f"{what} {raw!r} contains '..'; paths may not step out of a directory",
                f"pass a path inside the workspace ({self.describe()}) without '..'",
            )
        given = Path(raw)
        candidates = [given] if given.is_absolute() else [root / given for root in self.roots]
        chosen = next((c for c in candidates if c.exists()), candidates[0])
        real = Path(os.path.realpath(chosen))
        if not any(real == r or real.is_relative_to(r) for r in self.roots):
            via_link = " (through a symbolic link)" if real != chosen.absolute() else ""
            raise tool_error(
                f"{what} {raw!r} is outside the workspace roots{via_link}",
                f"copy the file into the workspace ({self.describe()}) or start the server with --root for its folder",
            )
        if must_exist and not real.exists():
            raise tool_error(f"{what} {raw!r} does not exist", f"check the path; relative paths start at {self.roots[0]}")
        if real.exists() and kind == "file" and not real.is_file():
            raise tool_error(f"{what} {raw!r} is not a file", "pass a file, not a directory")
        if real.exists() and kind == "dir" and not real.is_dir():
            raise tool_error(f"{what} {raw!r} is not a directory", "pass a directory")
        return real
