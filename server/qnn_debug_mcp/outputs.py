"""Choose where a tool writes a new run, without ever overwriting one.

The default is ``qnn-debug-runs/<group>/<leaf>`` (group = the model's stem) in the first workspace root (the CLI's own
convention); if that is taken, ``<leaf>-2``, ``<leaf>-3`` ... Directories already handed out are
remembered (``claimed``, kept in the app state) so two jobs started back to back never share one.
"""

from __future__ import annotations

from pathlib import Path

from .errors import tool_error
from .workspace import Workspace


def _free(path: Path, claimed: set[Path]) -> bool:
    return path not in claimed and (not path.exists() or (path.is_dir() and not any(path.iterdir())))


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
        base = ws.roots[0] / "qnn-debug-runs" / group
        path = base / leaf
        n = 2
        while not _free(path, claimed):
            path = base / f"{leaf}-{n}"
            n += 1
    claimed.add(path)
    return path
