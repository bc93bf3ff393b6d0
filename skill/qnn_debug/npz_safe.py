"""Open ``.npz`` archives someone else wrote without trusting them: limits checked before decompression.

An ``.npz`` is a zip of ``.npy`` members. A hostile or damaged one can declare a 4 TiB member, hide a
1 GiB zip bomb in 1 MB, repeat a member name, hold complex or object arrays, or fail inside zlib. All of
that is refused here with a :class:`BadInputError` naming the member, using only the zip directory and
each member's small ``.npy`` header, before any array is allocated.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, Any

from . import fs
from .errors import BadInputError

MAX_MEMBER_BYTES = 2 << 30
MAX_MEMBERS = 100_000
MAX_HEADER_BYTES = 1 << 16
MAX_DIMS = 32
BOMB_MIN_BYTES = 64 << 20
BOMB_RATIO = 1000
REAL_KINDS = "biuf"  # bool, signed/unsigned integers, floats: the only tensors a model takes or makes


@dataclass(frozen=True)
class MemberInfo:
    """What an ``.npy`` member declares, checked against its zip entry."""

    name: str
    dtype: Any
    shape: tuple[int, ...]
    nbytes: int


def _bad(path: str | os.PathLike[str], text: str, hint: str = "save it again with numpy.savez(path, **arrays)") -> BadInputError:
    return BadInputError(f"{os.fspath(path)} is not a readable .npz file: {text}", hint=hint)


def check_npy_header(stream: IO[bytes], *, path: str | os.PathLike[str], member: str, declared: int) -> MemberInfo:
    """Read one member's ``.npy`` header and check dtype, shape and that its size matches ``declared``."""
    import numpy as np
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = npy.read_array_header_1_0(stream, max_header_size=MAX_HEADER_BYTES)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy.read_array_header_2_0(stream, max_header_size=MAX_HEADER_BYTES)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except (ValueError, SyntaxError, EOFError, zlib.error, zipfile.BadZipFile, OSError) as e:
        raise _bad(path, f"member {member!r} is not a valid .npy array ({fs_safe(str(e))})") from None
    del fortran
    dt = np.dtype(dtype)
    if dt.hasobject or dt.kind not in REAL_KINDS or dt.fields is not None:
        raise _bad(path, f"member {member!r} has dtype {dt} (only real numbers and bools are accepted)",
                   hint="convert it first, e.g. array.real.astype(numpy.float32); complex and object arrays are refused")
    if len(shape) > MAX_DIMS or any((not isinstance(d, int)) or d < 0 for d in shape):
        raise _bad(path, f"member {member!r} has an invalid shape {shape}")
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dt.itemsize
    header_end = stream.tell() if stream.seekable() else None
    if header_end is not None and nbytes + header_end != declared:
        raise _bad(path, f"member {member!r} declares shape {list(shape)} {dt} ({nbytes} bytes) but holds "
                   f"{declared - header_end} bytes of data")
    return MemberInfo(member, dt, tuple(shape), nbytes)


def fs_safe(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class _Counting:
    """A forward-only stream wrapper that knows its position (zip member streams are not seekable)."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._pos += len(data)
        return data

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True  # tell() is all check_npy_header needs


def check_npz(path: str | os.PathLike[str], *, max_member_bytes: int = MAX_MEMBER_BYTES,
              expected_bytes: dict[str, int] | None = None) -> dict[str, MemberInfo]:
    """Check the archive's directory and every member header; return what each member holds.

    ``expected_bytes`` (array name → data bytes) tightens the limit to what the model needs.
    """
    with fs.open_read(path, what="npz file") as f:
        try:
            zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise _bad(path, f"not a readable .npz archive ({fs_safe(str(e))})") from None
        with zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise _bad(path, f"has {len(infos)} members (the limit is {MAX_MEMBERS})")
            seen: set[str] = set()
            out: dict[str, MemberInfo] = {}
            for info in infos:
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if info.filename in seen:
                    raise _bad(path, f"holds member {info.filename!r} twice", hint="save it again with numpy.savez; "
                               "an archive with duplicate names is ambiguous")
                seen.add(info.filename)
                limit = max_member_bytes
                if expected_bytes is not None and name in expected_bytes:
                    limit = min(limit, expected_bytes[name] + MAX_HEADER_BYTES + 128)
                if info.file_size > limit:
                    raise _bad(path, f"member {info.filename!r} declares {info.file_size} bytes, over the limit of "
                               f"{limit} bytes for it", hint="pass arrays of the model's own input shapes")
                if info.file_size > BOMB_MIN_BYTES and info.file_size > BOMB_RATIO * max(info.compress_size, 1):
                    raise _bad(path, f"member {info.filename!r} expands {info.compress_size} bytes to "
                               f"{info.file_size} (a zip bomb?)", hint="save the arrays with numpy.savez (uncompressed)")
                if info.flag_bits & 0x1:
                    raise _bad(path, f"member {info.filename!r} is encrypted")
                try:
                    with zf.open(info) as member:
                        meta = check_npy_header(_Counting(member), path=path, member=info.filename,  # type: ignore[arg-type]
                                                declared=info.file_size)
                except BadInputError:
                    raise
                except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, NotImplementedError) as e:
                    raise _bad(path, f"member {info.filename!r} cannot be read ({fs_safe(str(e))})") from None
                out[name] = meta
            return out


def kind_of(path: str | os.PathLike[str]) -> str:
    """``npz``, ``npy`` or ``other``, from the file's first bytes (read through the confined opener)."""
    with fs.open_read(path, what="array file") as f:
        head = f.read(6)
    if head.startswith(b"PK"):
        return "npz"
    return "npy" if head == b"\x93NUMPY" else "other"


def load_npz(path: str | os.PathLike[str], *, max_member_bytes: int = MAX_MEMBER_BYTES,
             expected_bytes: dict[str, int] | None = None) -> dict[str, Any]:
    """Every array of a checked archive (for inputs: small, needed whole)."""
    import numpy as np

    check_npz(path, max_member_bytes=max_member_bytes, expected_bytes=expected_bytes)
    with fs.opened_path(path, what="npz file") as name:
        try:
            with np.load(name, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError) as e:
            raise _bad(path, f"cannot be read ({fs_safe(str(e))})") from None


def open_npz(path: str | os.PathLike[str], *, max_member_bytes: int = MAX_MEMBER_BYTES,
             expected_bytes: dict[str, int] | None = None) -> Any:
    """A checked archive opened lazily (``numpy.lib.npyio.NpzFile``); members decompress on access, each
    within the size its zip entry declared (zipfile never returns more)."""
    import numpy as np

    check_npz(path, max_member_bytes=max_member_bytes, expected_bytes=expected_bytes)
    f = fs.open_read(path, what="npz file")
    try:
        npz = np.load(f, allow_pickle=False)
    except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError) as e:
        f.close()
        raise _bad(path, f"cannot be read ({fs_safe(str(e))})") from None
    npz.fid = f  # closing the archive closes our descriptor too
    return npz
