"""Where a fix writes: a new file next to the user's, never over an existing one, and never half written."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from .. import fs
from ..errors import BadInputError

MAX_TRIES = 100


def write_next_to(original: Path, suffix: str, data: bytes) -> Path:
    """``<stem>.<suffix><ext>`` beside ``original`` (``-2``, ``-3``... when taken): the bytes go to a hidden temporary
    file first and are then hard-linked under the free name, so a reader sees the whole file or none, and an
    existing file (a previous fix) is never replaced."""
    tmp = original.with_name(f".{original.stem}.{suffix}.{secrets.token_hex(4)}.tmp")
    with fs.open_new(tmp, what="fixed model") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        for n in range(1, MAX_TRIES + 1):
            name = f"{original.stem}.{suffix}{'' if n == 1 else f'-{n}'}{original.suffix}"
            path = original.with_name(name)
            if path.exists() or path.is_symlink():
                continue
            try:
                os.link(tmp, path)
            except FileExistsError:
                continue
            return path
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    raise BadInputError(f"{MAX_TRIES} fixed copies of {original.name} already exist",
                        hint="remove the old ones you no longer need")
