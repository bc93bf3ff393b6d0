"""Read ``.npy`` tensor files chunk by chunk into reused buffers (the fast path of a comparison).

Why not ``np.load(mmap_mode="r")`` per tensor: for thousands of tensors its per-file cost (memmap
object, header ``literal_eval``, page faults on first touch) dominated a 2 GiB comparison. Reading with
``readinto`` into buffers that live for the whole comparison touches every byte once and allocates
nothing per tensor; each file is opened once for its header and its data. Headers are parsed once per
distinct header text (runs repeat a few shapes).
``prefetch`` asks the kernel to start reading the next tensor while this one is compared.
"""

from __future__ import annotations

import ast
import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BadInputError
from ..runstore import check_tensor_dtype, open_tensor_fd

_MAGIC = b"\x93NUMPY"
_header_cache: dict[bytes, tuple[np.dtype, tuple[int, ...], bool]] = {}


@dataclass(frozen=True)
class NpyFile:
    path: str | Path
    offset: int  # first data byte
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    size: int  # elements


_HEAD = 4096  # one read takes the magic, the header length and (almost always) the whole header


def _parse(path: str | Path, head: bytes, read_more: Callable[[int], bytes], file_size: int) -> NpyFile:
    if len(head) < 10 or head[:6] != _MAGIC:
        raise BadInputError(f"{path} is not a .npy file", hint="re-run the capture")
    if head[6] == 1:
        hlen, start = int.from_bytes(head[8:10], "little"), 10
    else:
        hlen, start = int.from_bytes(head[8:12], "little"), 12
    text = head[start : start + hlen]
    if len(text) < hlen:
        text += read_more(hlen - len(text))
    parsed = _header_cache.get(text)
    if parsed is None:
        try:
            header = ast.literal_eval(text.decode("latin1"))
            parsed = (np.dtype(np.lib.format.descr_to_dtype(header["descr"])), tuple(header["shape"]),
                      bool(header["fortran_order"]))
        except (ValueError, KeyError, TypeError, SyntaxError) as e:
            raise BadInputError(f"tensor file {path} has a corrupt header: {e}", hint="re-run the capture") from None
        _header_cache[text] = parsed
    dtype, shape, fortran = parsed
    check_tensor_dtype(dtype, path)
    npy = NpyFile(path, start + hlen, dtype, shape, fortran, math.prod(shape))
    if file_size < npy.offset + npy.size * dtype.itemsize:
        raise BadInputError(f"tensor file {path} is truncated", hint="re-run the capture")
    return npy


class NpyStream:
    """One open ``.npy`` file: its header, then its data in sequential chunks read into a caller-owned
    buffer (the workspace's, reused for every tensor). The file is opened once for both."""

    def __init__(self, path: str | Path, buffer: bytearray | None = None):
        if not os.path.lexists(path):
            raise BadInputError(f"tensor file {path} is missing", hint="re-run the capture")
        self._file = os.fdopen(open_tensor_fd(path), "rb", buffering=0)  # closed by __exit__/close
        try:
            head = self._file.read(_HEAD) or b""
            self.npy = _parse(path, head, self._read_exactly, os.fstat(self._file.fileno()).st_size)
        except BaseException:
            self._file.close()
            raise
        self.buffer = buffer if buffer is not None else bytearray()

    def _read_exactly(self, n: int) -> bytes:
        return self._file.read(n) or b""

    def __enter__(self) -> NpyStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def chunks(self, chunk: int) -> Iterator[np.ndarray]:
        npy, item = self.npy, self.npy.dtype.itemsize
        need = min(chunk, max(npy.size, 1)) * item
        if len(self.buffer) < need:
            self.buffer.extend(bytes(need - len(self.buffer)))
        view = memoryview(self.buffer)
        self._file.seek(npy.offset)
        left = npy.size
        while left > 0:
            n = min(chunk, left)
            got = self._file.readinto(view[: n * item])
            if got != n * item:
                raise BadInputError(f"tensor file {npy.path} ended early", hint="re-run the capture")
            yield np.frombuffer(self.buffer, dtype=npy.dtype, count=n)
            left -= n


def prefetch(path: str | Path) -> None:
    """Ask the kernel to read ``path`` ahead (no-op where posix_fadvise does not exist)."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:  # never waits on a FIFO; only a regular file is read ahead (the real open refuses the rest)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)
