"""Where a fix writes: a new file next to the user's, never over an existing one."""

from __future__ import annotations

from pathlib import Path

from .. import fs
from ..errors import BadInputError

MAX_TRIES = 100


def write_next_to(original: Path, suffix: str, data: bytes) -> Path:
    """``<stem>.<suffix><ext>`` beside ``original`` (``-2``, ``-3``... when taken), created exclusively."""
    for n in range(1, MAX_TRIES + 1):
        name = f"{original.stem}.{suffix}{'' if n == 1 else f'-{n}'}{original.suffix}"
        path = original.with_name(name)
        if path.exists() or path.is_symlink():
            continue
        with fs.open_new(path, what="fixed model") as f:
            f.write(data)
        return path
    raise BadInputError(f"{MAX_TRIES} fixed copies of {original.name} already exist",
                           hint="remove the old ones you no longer need")
