"""Choose where a tool writes a new run, without ever overwriting one.

The default is ``qnn-debug-runs/<group>/<leaf>`` (group = the model's stem) in the first workspace root (the CLI's own
convention); if that is taken, ``<leaf>-2``, ``<leaf>-3`` ... Directories already handed out are
remembered (``claimed``, kept in the app state) so two jobs started back to back never share one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import tool_error
from .workspace import Workspace


def safe_name(name: str, limit: int = 80) -> str:
    """A folder name from a model's stem: plain characters, bounded (a 255-byte stem must not break mkdir)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:limit] or "model"


def _free(path: Path, claimed: set[Path]) -> bool:
    try:
        return path not in claimed and (not os.path.lexists(path) or (path.is_dir() and not any(path.iterdir())))
    except OSError:
        return False


def new_run_dir(ws: Workspace, raw: str | None, *, claimed: set[Path], group: str, leaf: str, what: str = "out") -> Path:
    """A confined, unused output directory for one run (not created here; the engine creates it).

    ``group`` is the folder under ``qnn-debug-runs`` (the model's stem, or "compare").
    """
    if raw:
        path = ws.resolve(raw, what=what, kind="dir", must_exist=False)
        if not _free(path, claimed):
            raise tool_error(f"{what} {raw!r} already holds files or another run",
                             "omit `out` to get a fresh directory, or name a new one")
    else:
        # the default folder is checked like an argument: a planted link to outside is refused, not followed
        base = ws.resolve(str(ws.roots[0] / "qnn-debug-runs" / safe_name(group)), what="default output folder",
                          kind="dir", must_exist=False)
        leaf = safe_name(leaf)
        path = base / leaf
        n = 2
        while not _free(path, claimed):
            path = base / f"{leaf}-{n}"
            n += 1
        path = ws.resolve(str(path), what="default output folder", kind="dir", must_exist=False)
    claimed.add(path)
    return path
