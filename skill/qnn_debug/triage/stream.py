"""Reading a log: cut raw bytes into line-aligned chunks and clean them, so a log of any size streams in bounded memory.

Why 4 MiB chunks: a device log can be hundreds of MB. Line numbers are kept exact: CRLF becomes LF, a lone CR
(progress bars) becomes a space, ANSI colours and NULs are removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO

from .weights import CHUNK_BYTES, MAX_LINE_BYTES

_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def chunks_of_bytes(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), CHUNK_BYTES):
        yield data[i : i + CHUNK_BYTES]


def chunks_of_stream(fh: IO[bytes]) -> Iterator[bytes]:
    while True:
        block = fh.read(CHUNK_BYTES)
        if not block:
            return
        yield block


def lines_aligned(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Re-cut raw chunks at newlines so no line (nor a UTF-8 sequence) is split, except absurdly long lines."""
    carry = b""
    for block in chunks:
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) < MAX_LINE_BYTES:
                carry = data
                continue
            cut = len(data) - 1
        carry = data[cut + 1 :]
        yield data[: cut + 1]
    if carry:
        yield carry


def clean(raw: bytes) -> tuple[str, int]:
    """Normalise one aligned chunk (bytes first: much faster than on a wide str) and decode it.

    Returns the text and the count of NUL/undecodable bytes.
    """
    nul = raw.count(b"\x00")
    if nul:
        raw = raw.replace(b"\x00", b"")
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b" ")
    text = raw.decode("utf-8", "replace")
    return text, nul + (text.count("\ufffd") if "\ufffd" in text else 0)
