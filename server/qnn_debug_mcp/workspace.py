"""Confine every file argument to the workspace roots.

The operator's ``--root`` directories (default: the current directory) bound everything. A client may
offer its own roots (MCP ``roots/list``); they are *intersected* with the operator's: a client can
narrow the workspace, never widen it (offering ``file:///`` changes nothing). A path is accepted only
if, after resolving symlinks, it lies inside a root and is a regular file or a directory (FIFOs,
sockets and devices are refused at once: reading one would hang or leak). ``..`` components are
refused outright, even when they would land back inside, so a model never learns to build paths that way.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import unquote, urlparse

from .errors import tool_error

MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255
PathKind = Literal["file", "dir", "any"]


def roots_from_uris(uris: Iterable[str]) -> list[Path]:
    """Local directories named by ``file://`` root URIs; other schemes cannot hold our files."""
    out: list[Path] = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme == "file" and parsed.path and parsed.netloc in ("", "localhost"):
            out.append(Path(unquote(parsed.path)))
    return out


def _real(path: Path) -> Path | None:
    try:
        return Path(os.path.realpath(path, strict=False))
    except (OSError, ValueError):
        return None


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def intersect_roots(offered: Sequence[Path], operator: Sequence[Path]) -> list[Path]:
    """The parts of the client's roots that lie inside the operator's: a client narrows, never widens.

    An offered root inside an operator root is kept as is; an operator root inside an offered root
    (e.g. the client offered ``/``) is kept instead; roots that do not overlap are dropped.
    """
    ops = [r for r in (_real(p) for p in operator) if r is not None]
    out: list[Path] = []
    for raw in offered:
        real = _real(raw)
        if real is None:
            continue
        for op in ops:
            if _inside(real, op):
                out.append(real)
            elif _inside(op, real):
                out.append(op)
    return list(dict.fromkeys(out))


def _usable(raw: str, what: str) -> None:
    if "\x00" in raw or len(raw) > MAX_PATH_CHARS:
        raise tool_error(f"{what} is not a usable path (over {MAX_PATH_CHARS} characters or a NUL byte)",
                         "pass a normal file path")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise tool_error(f"{what} is not valid UTF-8", "pass the path as plain text") from None
    long = next((part for part in PurePosixPath(raw).parts if len(part.encode("utf-8")) > MAX_NAME_CHARS), None)
    if long is not None:
        raise tool_error(f"{what} has a path component of {len(long.encode('utf-8'))} bytes (the limit is "
                         f"{MAX_NAME_CHARS})", "use shorter file and folder names")


class Workspace:
    """The directories a tool may read from and write to during one call."""

    def __init__(self, roots: Sequence[Path]):
        resolved = [Path(os.path.realpath(r)) for r in roots]
        if not resolved:
            raise ValueError("a workspace needs at least one root")
        self.roots: list[Path] = list(dict.fromkeys(resolved))

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def contains(self, path: Path) -> bool:
        return any(_inside(path, r) for r in self.roots)

    def resolve(self, raw: str, *, what: str, kind: PathKind = "any", must_exist: bool = True,
                keep_links: bool = False) -> Path:
        """The real path for a user-supplied path, or a ToolError saying why it is refused.

        Relative paths are looked up under each root in turn (first existing wins; for a new
        output, the first root). ``keep_links``: the checks are the same (on the real path), but the
        path returned is the one given, made absolute, with its links kept (its own words matter).
        """
        if not raw or not raw.strip():
            raise tool_error(f"{what} is empty", f"pass a path inside the workspace ({self.describe()})")
        _usable(raw, what)
        if ".." in PurePosixPath(raw.replace("\\", "/")).parts:
            raise tool_error(
                f"{what} {raw!r} contains '..'; paths may not step out of a directory",
                f"pass a path inside the workspace ({self.describe()}) without '..'",
            )
        given = Path(raw)
        candidates = [given] if given.is_absolute() else [root / given for root in self.roots]
        chosen = next((c for c in candidates if os.path.lexists(c)), candidates[0])
        try:
            real = Path(os.path.realpath(chosen, strict=False))
            st: os.stat_result | None = os.stat(real)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise self._os_error(raw, what, e) from None
        if not self.contains(real):
            via_link = " (through a symbolic link)" if real != chosen.absolute() else ""
            raise tool_error(
                f"{what} {raw!r} is outside the workspace roots{via_link}",
                f"copy the file into the workspace ({self.describe()}) or start the server with --root for its folder",
            )
        if st is None:
            if must_exist:
                raise tool_error(f"{what} {raw!r} does not exist", f"check the path; relative paths start at {self.roots[0]}")
            return real
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise tool_error(f"{what} {raw!r} is not a regular file or directory (a FIFO, socket or device)",
                             "pass a regular file or directory")
        if kind == "file" and not stat.S_ISREG(st.st_mode):
            raise tool_error(f"{what} {raw!r} is not a file", "pass a file, not a directory")
        if kind == "dir" and not stat.S_ISDIR(st.st_mode):
            raise tool_error(f"{what} {raw!r} is not a directory", "pass a directory")
        return Path(os.path.abspath(chosen)) if keep_links else real

    @staticmethod
    def _os_error(raw: str, what: str, e: OSError) -> Exception:
        if e.errno == errno.ELOOP:
            return tool_error(f"{what} {raw!r} goes through a symbolic-link loop", "fix or remove the looping link")
        if e.errno == errno.ENAMETOOLONG:
            return tool_error(f"{what} {raw!r} is too long for the file system", "use a shorter path")
        if e.errno in (errno.EACCES, errno.EPERM):
            return tool_error(f"{what} {raw!r} cannot be read (permission denied)", "check the file's permissions")
        return tool_error(f"{what} {raw!r} cannot be used ({e.strerror})", "check the path")
