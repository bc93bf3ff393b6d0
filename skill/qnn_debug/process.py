"""Every child process the project starts (workers, MNN tools, adb, the MCP server's engine runs) goes through here.

Why one module: a child that outlives its caller keeps a phone busy, holds a run folder open or burns
the CPU of a shared machine. So every child is started the same way and stopped by one rule:

- it starts in its own session, hence its own process group, so it and whatever it starts can be
  signalled together without touching us;
- **the kill rule**: SIGTERM the group (and the groups its processes started), wait a short grace,
  SIGKILL them; after a normal exit the group is killed too, so helpers it left behind do not outlive it
  (adb's own server daemonizes into a session of its own and is not affected);
- a time limit, and optionally a stall limit: the group's CPU ticks (from ``/proc``, children included)
  and its output have not moved for ``stall_s`` seconds, i.e. it is blocked on I/O (a hung device,
  adb or file system);
- stdout is bounded (or goes to a log file), stderr keeps a bounded tail, and progress lines
  (``@@qnn-debug-progress {json}``) on stderr are handed to a callback as :class:`ProgressEvent`.

:func:`run` is the synchronous API (the engine); :func:`run_async` the asynchronous one (the MCP
server), which imports anyio only when called, so the engine does not need it.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .progress import PROGRESS_PREFIX, ProgressEvent

KILL_GRACE_S = 3.0  # between SIGTERM and SIGKILL
PIPE_GRACE_S = 2.0  # after the child exits, how long a helper it started may keep our pipes open
STALL_POLL_S = 1.0
MAX_STDOUT_BYTES = 64 << 20
STDERR_LINES = 2000
MAX_LINE_CHARS = 2000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

SyncProgress = Callable[[ProgressEvent], None]
AsyncProgress = Callable[[ProgressEvent], Awaitable[None]]


class ChildTimeout(Exception):
    """The child ran past its time limit, or stalled, and was killed with its group.

    Not an engine error on purpose: each caller words it for its user (adb, MNN2QNNModel, a tool call).
    """

    def __init__(self, limit_s: float, *, stalled: bool, output: str = "", stderr_tail: Sequence[str] = ()):
        what = "used no CPU and printed nothing for" if stalled else "did not finish within"
        super().__init__(f"child process {what} {limit_s:.0f} s")
        self.limit_s = limit_s
        self.stalled = stalled
        self.output = output
        self.stderr_tail = list(stderr_tail)


@dataclass
class Finished:
    """A child that exited: its status, its (bounded) stdout and the non-progress lines of its stderr."""

    returncode: int
    stdout: bytes = b""
    stderr_lines: list[str] = field(default_factory=list)
    stdout_truncated: bool = False

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    def tail(self, lines: int = 12) -> list[str]:
        return [ln for ln in self.stderr_lines if ln.strip()][-lines:]

    def status(self) -> str:
        """``exit status 3`` or ``signal SIGSEGV``, for messages."""
        return describe_status(self.returncode)


def describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def parse_progress(line: str) -> ProgressEvent | None:
    """The event a ``@@qnn-debug-progress {json}`` line carries, or None for any other line."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        return ProgressEvent(**json.loads(line[len(PROGRESS_PREFIX):]))
    except (TypeError, ValueError):
        return None


class _Lines:
    """Splits a byte stream into lines; progress lines become events, the rest is kept (bounded) and logged."""

    def __init__(self, log: IO[str] | None = None):
        self.kept: deque[str] = deque(maxlen=STDERR_LINES)
        self.seen = 0  # bytes received: output counts as activity for the stall check
        self._buf = b""
        self._log = log

    def feed(self, chunk: bytes) -> list[ProgressEvent]:
        self.seen += len(chunk)
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return [e for e in (self._line(raw) for raw in lines) if e is not None]

    def close(self) -> list[ProgressEvent]:
        rest, self._buf = self._buf, b""
        events = [e for e in [self._line(rest)] if e is not None] if rest else []
        if self._log is not None:
            self._log.flush()
        return events

    def _line(self, raw: bytes) -> ProgressEvent | None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        event = parse_progress(line)
        if event is not None:
            return event
        if self._log is not None:
            self._log.write(line + "\n")
        self.kept.append(line[:MAX_LINE_CHARS])
        return None


class _Stdout:
    """Bounded stdout capture: the first ``limit`` bytes are kept."""

    def __init__(self, limit: int):
        self.data = bytearray()
        self.limit = limit
        self.truncated = False
        self.seen = 0

    def feed(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data.extend(chunk[:room])


# -- the process tree and the kill rule ------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int, int]] | None:
    """pid -> (ppid, pgid, CPU ticks incl. reaped children) of every process, or None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    table: dict[int, tuple[int, int, int]] = {}
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]), sum(int(x) for x in fields[11:15]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def _tree(pgid: int, table: Mapping[int, tuple[int, int, int]]) -> set[int]:
    """Pids of group ``pgid`` and of everything its processes started (even into groups of their own)."""
    pids = {pid for pid, (_, group, _) in table.items() if group == pgid}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in pids and pid not in pids}
        pids |= more
        grew = bool(more)
    return pids


def group_cpu_ticks(pgid: int) -> int | None:
    """CPU time (clock ticks, reaped children included) of the group and its descendants; None without /proc."""
    table = _proc_table()
    if table is None:
        return None
    pids = _tree(pgid, table)
    return sum(table[p][2] for p in pids) if pids else None


def _groups(pgid: int) -> set[int]:
    table = _proc_table()
    groups = {pgid}
    if table is not None:
        groups |= {table[p][1] for p in _tree(pgid, table)}
    own = os.getpgrp()
    groups.discard(own)  # never ourselves, even if a descendant re-joined our group
    return groups


def signal_groups(groups: set[int], sig: signal.Signals) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)


def kill_sync(proc: subprocess.Popen[bytes]) -> None:
    """The kill rule for a child started by :func:`start`: SIGTERM its groups, grace, SIGKILL them."""
    if proc.poll() is not None:
        signal_groups({proc.pid}, signal.SIGKILL)  # gone already: make sure its helpers are too
        return
    groups = _groups(proc.pid)
    signal_groups(groups, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    signal_groups(groups | _groups(proc.pid), signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


class _Activity:
    """Tracks the last time the child's tree used CPU or printed something."""

    def __init__(self, pgid: int, stall_s: float | None, output: Callable[[], int]):
        self.pgid, self.stall_s, self.output = pgid, stall_s, output
        self.last = (group_cpu_ticks(pgid), output())
        self.since = time.monotonic()
        self.next_poll = self.since

    def stalled(self) -> bool:
        if self.stall_s is None:
            return False
        now = time.monotonic()
        if now < self.next_poll:
            return False
        self.next_poll = now + min(STALL_POLL_S, self.stall_s / 4)
        current = (group_cpu_ticks(self.pgid), self.output())
        if current != self.last:
            self.last, self.since = current, now
            return False
        return now - self.since >= self.stall_s


def environ() -> dict[str, str]:
    """A copy of our environment. Another thread may set a variable meanwhile (``fs.scratch`` does, while a
    diagnose runs its baseline and its dump side by side), which breaks a copy half-way: then copy again."""
    while True:
        try:
            return dict(os.environ)
        except RuntimeError:  # "dictionary changed size during iteration"
            continue


def unbuffered(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``argv`` under ``stdbuf -o0 -e0`` when the machine has it, so a C++ tool that crashes leaves its last lines
    (its stdout is block-buffered into our pipe and lost with the process otherwise); else ``argv`` and a note."""
    import shutil

    stdbuf = shutil.which("stdbuf")
    if stdbuf is None:
        return list(argv), "stdbuf not found: the tool's output is block-buffered, a crash may lose its last lines"
    return [stdbuf, "-o0", "-e0", *argv], None


def qnn_sdk_env(sdk: str | os.PathLike[str] | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``QNN_SDK_ROOT`` and the SDK's x86_64 libraries for an MNN tool: MNN2QNNModel's generated Makefile finds the
    SDK headers only through ``QNN_SDK_ROOT``. Returns only the variables to set (empty without an SDK)."""
    if sdk is None:
        return {}
    root = os.path.abspath(os.fspath(sdk))
    lib = os.path.join(root, "lib", "x86_64-linux-clang")
    old = (environ() if base is None else dict(base)).get("LD_LIBRARY_PATH")
    return {"QNN_SDK_ROOT": root, "LD_LIBRARY_PATH": os.pathsep.join([lib, *([old] if old else [])])}


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    out = environ() if env is None else dict(env)
    out.setdefault("PYTHONUNBUFFERED", "1")
    return out


# -- synchronous API ------------------------------------------------------------------------------------------


def start(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
          stdout: IO[Any] | None = None, merge_stderr: bool = False) -> subprocess.Popen[bytes]:
    """Start ``argv`` (never through a shell) in a session of its own; stdin is /dev/null.

    ``stdout``: a file to write stdout to (a log), else a pipe. ``merge_stderr``: stderr joins stdout.
    Raises ``OSError`` (e.g. FileNotFoundError) when the program cannot be started.
    """
    return subprocess.Popen(list(argv), cwd=cwd, env=_child_env(env), stdin=subprocess.DEVNULL,
                            stdout=stdout if stdout is not None else subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, start_new_session=True)


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[Any] | None = None,
    merge_stderr: bool = False,
    log: IO[str] | None = None,
    on_progress: SyncProgress | None = None,
    stall_s: float | None = None,
    max_stdout: int = MAX_STDOUT_BYTES,
) -> Finished:
    """Run ``argv`` to completion under the rules above and return how it ended.

    Raises :class:`ChildTimeout` after killing the group when ``timeout`` (or ``stall_s``) is exceeded,
    and kills the group before re-raising anything else that interrupts the wait (e.g. SIGTERM turned
    into ``SystemExit``). Non-progress stderr lines are also written to ``log`` when given.
    """
    proc = start(argv, cwd=cwd, env=env, stdout=stdout, merge_stderr=merge_stderr)
    out = _Stdout(max_stdout)
    err = _Lines(log)
    try:
        _pump(proc, out, err, on_progress, timeout, stall_s)
        returncode = proc.wait()
    finally:
        kill_sync(proc)  # after a normal exit too: nothing it started outlives it
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    return Finished(returncode, bytes(out.data), list(err.kept), out.truncated)


def _pump(proc: subprocess.Popen[bytes], out: _Stdout, err: _Lines, on_progress: SyncProgress | None,
          timeout: float, stall_s: float | None) -> None:
    sel = selectors.DefaultSelector()
    streams: dict[int, Callable[[bytes], None]] = {}

    def progress(events: list[ProgressEvent]) -> None:
        for event in events:
            if on_progress is not None:
                on_progress(event)

    if proc.stdout is not None:
        streams[proc.stdout.fileno()] = out.feed
        sel.register(proc.stdout, selectors.EVENT_READ)
    if proc.stderr is not None:
        streams[proc.stderr.fileno()] = lambda chunk: progress(err.feed(chunk))
        sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    activity = _Activity(proc.pid, stall_s, lambda: out.seen + err.seen)
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline or activity.stalled():
                kill_sync(proc)
                stalled = now < deadline
                raise ChildTimeout(stall_s if stalled and stall_s else timeout, stalled=stalled,
                                   output=bytes(out.data).decode("utf-8", "replace"), stderr_tail=list(err.kept)[-40:])
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and (not streams or now - exited_at > PIPE_GRACE_S):
                return
            wait_s = max(0.0, min(deadline - now, STALL_POLL_S))
            if not streams:  # the child closed its stdio but runs on: keep honouring the limits
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait_s)
                continue
            for key, _ in sel.select(timeout=wait_s):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    streams[key.fd](chunk)
                else:
                    sel.unregister(key.fileobj)
                    del streams[key.fd]
    finally:
        sel.close()
        progress(err.close())


# -- asynchronous API (anyio, imported when used) -----------------------------------------------------------------


async def run_async(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[Any] | None = None,
    on_progress: AsyncProgress | None = None,
    stall_s: float | None = None,
    max_stdout: int = MAX_STDOUT_BYTES,
) -> Finished:
    """:func:`run` for an event loop. Cancelling the awaiting task kills the group before the
    cancellation propagates, so a cancelled call leaves nothing running."""
    import anyio

    process = await anyio.open_process(list(argv), cwd=cwd, env=_child_env(env), stdin=subprocess.DEVNULL,
                                       stdout=stdout if stdout is not None else subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True)
    out = _Stdout(max_stdout)
    err = _Lines()
    stalled = False
    try:
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:
                if stall_s is not None:
                    async def watch() -> None:
                        nonlocal stalled
                        activity = _Activity(process.pid, stall_s, lambda: out.seen + err.seen)
                        while not activity.stalled():
                            await anyio.sleep(min(STALL_POLL_S, stall_s / 4))
                        stalled = True
                        tg.cancel_scope.cancel()

                    tg.start_soon(watch)
                await _drain_async(process, out, err, on_progress)
                tg.cancel_scope.cancel()
        if stalled or scope.cancelled_caught:
            with anyio.CancelScope(shield=True):
                await _kill_async(process)
            raise ChildTimeout(stall_s if stalled and stall_s else timeout, stalled=stalled,
                               output=bytes(out.data).decode("utf-8", "replace"), stderr_tail=list(err.kept)[-40:])
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _kill_async(process)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _kill_async(process)  # after a normal exit too
            await process.aclose()
    code = process.returncode if process.returncode is not None else -1
    return Finished(code, bytes(out.data), list(err.kept), out.truncated)


async def _drain_async(process: Any, out: _Stdout, err: _Lines, on_progress: AsyncProgress | None) -> None:
    """Read both pipes until the child exits; a helper holding a pipe open cannot stall us."""
    import anyio

    stdout_done, stderr_done = anyio.Event(), anyio.Event()

    async def read_stdout() -> None:
        if process.stdout is not None:
            async for chunk in process.stdout:
                out.feed(chunk)
        stdout_done.set()

    async def send(events: list[ProgressEvent]) -> None:
        for event in events:
            if on_progress is not None:
                await on_progress(event)

    async def read_stderr() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            await send(err.feed(chunk))
        await send(err.close())
        stderr_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(read_stderr)
        await process.wait()
        with anyio.move_on_after(PIPE_GRACE_S):
            await stdout_done.wait()
            await stderr_done.wait()
        tg.cancel_scope.cancel()


async def _kill_async(process: Any) -> None:
    """The kill rule (see :func:`kill_sync`) without blocking the event loop."""
    import anyio

    if process.returncode is not None:
        signal_groups({process.pid}, signal.SIGKILL)
        return
    groups = _groups(process.pid)
    signal_groups(groups, signal.SIGTERM)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()
    signal_groups(groups | _groups(process.pid), signal.SIGKILL)
    with anyio.move_on_after(KILL_GRACE_S):
        await process.wait()
