"""A line relay in front of the stdio transport, so malformed JSON-RPC gets an error reply, not silence.

The SDK (mcp 2.3) drops a stdin line it cannot parse as a JSON-RPC message — ``params`` given as a list,
arguments nested 2,000 levels deep, broken JSON — without answering, so the client waits forever. We put
two pipes between the real stdin/stdout and the SDK: each incoming line is checked here first; a good
one is passed on unchanged, a bad request is answered with the JSON-RPC error it deserves (-32700 parse
error, -32600 invalid request, -32602 invalid params). Outgoing lines are copied whole, so our replies
never interleave with the SDK's. Replacing fd 0/1 (rather than handing the SDK our own streams) keeps
the SDK's own protection of fd 1 against stray native output intact.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import struct
import termios
import threading
import time
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 64  # our tools' arguments nest a few levels; anything deeper is hostile or broken
MAX_LINE_BYTES = 64 << 20
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of parsed JSON, stopping once ``limit`` is passed (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


_ID_VALUE = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def top_level_id(line: bytes) -> Any:
    """The ``id`` of a message too deep for the JSON parser, found by a flat scan of its outermost object,
    so the client gets its error instead of waiting for an answer that never comes."""
    depth, i, n, in_str = 0, 0, len(line), False
    while i < n:
        c = line[i]
        if in_str:
            if c == 0x5C:
                i += 2
                continue
            in_str = c != 0x22
        elif c == 0x22:
            if depth == 1 and line.startswith(b'"id"', i):
                m = _ID_VALUE.match(line, i)
                if m:
                    with contextlib.suppress(ValueError):
                        return json.loads(m.group(1))
            in_str = True
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
        i += 1
    return None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
NOT_UTF8_HINT = ("send the message as UTF-8; for a log with undecodable bytes, save it to a file in the workspace "
                 "and pass its path (log_path) instead of its text")


def lone_surrogate(value: Any) -> str | None:
    """The first lone UTF-16 surrogate in any key or string of parsed JSON (``"\\udcff"`` escapes decode to one; a
    valid pair decodes to one character), else None. Such a string cannot be encoded as UTF-8, so no reply that
    echoes it could be sent: the request is refused instead."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            m = _SURROGATE.search(item)
            if m:
                return f"U+{ord(m.group()):04X}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _error(msg_id: Any, code: int, message: str) -> bytes:
    reply = {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
    return (json.dumps(reply) + "\n").encode()


def check_line(line: bytes) -> bytes | None:
    """None if ``line`` may go to the SDK, else the error reply to send back (``b""``: drop silently)."""
    if not line.strip():
        return None
    if len(line) > MAX_LINE_BYTES:
        return _error(None, INVALID_REQUEST, f"Invalid Request: message over {MAX_LINE_BYTES} bytes")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        return _error(top_level_id(line), PARSE_ERROR, f"Parse error: the message is not valid UTF-8 (byte "
                      f"0x{line[e.start]:02x} at offset {e.start}): {NOT_UTF8_HINT}")
    try:
        msg = json.loads(line)
    except RecursionError:
        return _error(top_level_id(line), INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels")
    except ValueError as e:
        return _error(None, PARSE_ERROR, f"Parse error: {e}")
    if not isinstance(msg, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: a message must be one JSON object (no batches)")
    msg_id = msg.get("id")
    if not (msg_id is None or isinstance(msg_id, str | int)) or isinstance(msg_id, bool):
        return _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    is_request = "method" in msg and "id" in msg
    if _SURROGATE_ESCAPE.search(line):
        bad = lone_surrogate(msg)
        if bad is not None:
            return _error(msg_id, INVALID_PARAMS, f"Invalid params: a string holds a lone surrogate ({bad}), which "
                          f"is not valid Unicode: {NOT_UTF8_HINT}") if is_request else b""
    if _depth(msg, MAX_DEPTH) > MAX_DEPTH:
        return _error(msg_id, INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels") \
            if is_request else b""
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return _error(msg_id, INVALID_REQUEST, "Invalid Request: method must be a string") if is_request else b""
        params = msg.get("params")
        if params is not None and not isinstance(params, dict):
            return _error(msg_id, INVALID_PARAMS, "Invalid params: params must be an object (by name), "
                          f"not {type(params).__name__}") if is_request else b""
        if is_request and msg.get("method") == "tools/call" and isinstance(params, dict):
            args = params.get("arguments")
            if args is not None and not isinstance(args, dict):
                return _error(msg_id, INVALID_PARAMS, "Invalid params: arguments must be an object")
    return None


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (0 when it cannot be told)."""
    try:
        buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", buf)[0])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class StdioRelay:
    """Owns the two relay threads; :meth:`close` flushes what the server wrote and restores fd 1."""

    def __init__(self) -> None:
        self._real_in = os.dup(0)
        self._real_out = os.dup(1)
        in_r, self._in_w = os.pipe()
        out_r, out_w = os.pipe()
        os.dup2(in_r, 0)
        os.close(in_r)
        os.dup2(out_w, 1)
        os.close(out_w)
        self._out_r = out_r
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._pump_in, name="stdio-relay-in", daemon=True)
        self._writer = threading.Thread(target=self._pump_out, name="stdio-relay-out", daemon=True)
        self._reader.start()
        self._writer.start()

    def _pump_in(self) -> None:
        with os.fdopen(self._real_in, "rb", buffering=1 << 16) as src:
            try:
                for line in src:
                    reply = check_line(line)
                    if reply is None:
                        _write_all(self._in_w, line if line.endswith(b"\n") else line + b"\n")
                    elif reply:
                        with self._lock:
                            _write_all(self._real_out, reply)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    os.close(self._in_w)

    def _pump_out(self) -> None:
        with os.fdopen(self._out_r, "rb", buffering=1 << 16) as src:
            try:
                for line in src:
                    with self._lock:
                        _write_all(self._real_out, line)
            except OSError:
                pass

    def close(self, timeout: float = 10.0) -> None:
        """The server is done: end our copy of the out pipe (fd 1 → stderr), drain it, restore nothing else."""
        with contextlib.suppress(OSError):
            os.dup2(2, 1)  # stray output at interpreter exit goes to stderr, never to the wire
        # The SDK may keep a private copy of the pipe's write end open, so EOF may never come: wait until
        # everything it wrote has been copied out (nothing left in the pipe), then stop.
        deadline = time.monotonic() + timeout
        while self._writer.is_alive() and time.monotonic() < deadline:
            self._writer.join(0.05)
            if _pending(self._out_r) == 0:
                self._writer.join(0.2)
                if _pending(self._out_r) == 0:
                    break
        with self._lock, contextlib.suppress(OSError):  # a line being copied right now finishes first
            os.close(self._real_out)


@contextlib.contextmanager
def guarded_stdio() -> Iterator[None]:
    relay = StdioRelay()
    try:
        yield
    finally:
        relay.close()
