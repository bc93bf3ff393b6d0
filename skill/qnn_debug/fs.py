"""The one place that opens files for the engine: confinement, file types and output claiming.

Why one place: the engine opens files it was given *and* files it found on its own (``runs`` in a
baseline.json, ``model.path`` in a run.json, the ``.raw`` files a dump manifest lists, default output
folders). Each of them is checked here at the moment of use:

- resolved (symlinks followed) and required to lie inside the allowed roots, when roots are set
  (``qnn-debug --root DIR``; the MCP server always passes its workspace roots);
- opened without following a final symlink (``O_NOFOLLOW`` on the resolved path, so a link swapped in
  after the check is refused) and re-verified through the opened descriptor (``/proc/self/fd``), so a
  parent folder swapped for a link between check and open cannot redirect the read;
- required to be a regular file (or a directory where one is expected): FIFOs, sockets and devices
  are refused at once, opened non-blocking so a FIFO can never hang the caller;
- long names, symlink loops and permission problems become :class:`BadInputError` with a hint.

Without roots (plain CLI use) the type and error rules still apply; only confinement is off.
The roots travel to worker processes through ``QNN_DEBUG_ROOTS`` so they apply there too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal

from .errors import BadInputError

ROOTS_ENV = "QNN_DEBUG_ROOTS"
SCRATCH_ENV = "QNN_DEBUG_SCRATCH"
CLAIM_FILE = ".qnn-debug-writing"
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095
DEFAULT_MAX_JSON_BYTES = 256 << 20
Kind = Literal["file", "dir", "any"]

_roots: list[Path] | None = None
_roots_loaded = False
_scratch: list[Path] = [Path(os.path.realpath(p)) for p in os.environ.get(SCRATCH_ENV, "").split(os.pathsep) if p]


def set_roots(roots: Sequence[str | os.PathLike[str]] | None) -> None:
    """Confine every later open to ``roots`` (``None`` or empty: no confinement). Inherited by children."""
    global _roots, _roots_loaded
    _roots_loaded = True
    if not roots:
        _roots = None
        os.environ.pop(ROOTS_ENV, None)
        return
    resolved: list[Path] = []
    for r in roots:
        real = Path(os.path.realpath(r))
        if not real.is_dir():
            raise BadInputError(f"--root {r} is not a directory", hint="pass an existing folder as --root")
        resolved.append(real)
    _roots = list(dict.fromkeys(resolved))
    os.environ[ROOTS_ENV] = os.pathsep.join(str(r) for r in _roots)


def allowed_roots() -> list[Path] | None:
    """The roots in force (``None``: unconfined)."""
    global _roots, _roots_loaded
    if not _roots_loaded:
        _roots_loaded = True
        env = os.environ.get(ROOTS_ENV)
        _roots = [Path(os.path.realpath(r)) for r in env.split(os.pathsep) if r] if env else None
    return _roots


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in [*roots, *_scratch])


@contextlib.contextmanager
def scratch(prefix: str = "qnn-debug-") -> Iterator[Path]:
    """A private temp folder the engine may use whatever the roots (made by us with ``mkdtemp``, mode 0700),
    removed afterwards, also on cancel (the CLI turns SIGTERM into an exception so this runs)."""
    import shutil
    import tempfile

    path = Path(os.path.realpath(tempfile.mkdtemp(prefix=prefix)))
    _scratch.append(path)
    os.environ[SCRATCH_ENV] = os.pathsep.join(str(p) for p in _scratch)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(ValueError):
            _scratch.remove(path)
        os.environ[SCRATCH_ENV] = os.pathsep.join(str(p) for p in _scratch)


def os_error(e: OSError, path: str | os.PathLike[str], what: str) -> BadInputError:
    """An OSError from touching ``path`` as a typed error with a next step."""
    name = str(path)
    shown = name if len(name) <= 300 else name[:150] + "…" + name[-100:]
    if e.errno == errno.ENAMETOOLONG:
        return BadInputError(f"{what} path is too long for the file system: {shown}", hint="use shorter file and folder names")
    if e.errno == errno.ELOOP:
        return BadInputError(f"{what} {shown} goes through a symbolic-link loop (or is a link where none is allowed)",
                             hint="fix or remove the link")
    if e.errno in (errno.EACCES, errno.EPERM):
        return BadInputError(f"{what} {shown} cannot be accessed (permission denied)", hint="check its permissions")
    if e.errno == errno.ENOENT:
        return BadInputError(f"{what} {shown} does not exist", hint="check the path")
    if e.errno == errno.ENOTDIR:
        return BadInputError(f"{what} {shown}: a parent of it is not a directory", hint="check the path")
    if e.errno == errno.ENOSPC:
        return BadInputError(f"no space left writing {what} {shown}", hint="free disk space and retry")
    return BadInputError(f"{what} {shown} cannot be used ({e.strerror or e})", hint="check the path")


def _check_name(path: str, what: str) -> None:
    if not path.strip():  # "" would otherwise resolve to the working directory
        raise BadInputError(f"no {what} path given (it is empty)", hint=f"pass the path of the {what}")
    if "\x00" in path:
        raise BadInputError(f"{what} path contains a NUL byte", hint="pass a normal file path")
    encoded = os.fsencode(path)
    if len(encoded) > MAX_PATH_BYTES:
        raise BadInputError(f"{what} path is {len(encoded)} bytes long (the limit is {MAX_PATH_BYTES})",
                            hint="use a shorter path")
    long = next((part for part in encoded.split(b"/") if len(part) > MAX_NAME_BYTES), None)
    if long is not None:
        raise BadInputError(f"{what} path has a component of {len(long)} bytes (the limit is {MAX_NAME_BYTES})",
                            hint="use shorter file and folder names")


def real_path(path: str | os.PathLike[str], *, what: str = "file") -> Path:
    """``path`` with every symlink resolved, confined to the roots; the file itself may not exist yet."""
    raw = os.fspath(path)
    _check_name(raw, what)
    try:
        real = Path(os.path.realpath(raw, strict=False))
    except (OSError, ValueError) as e:
        raise (os_error(e, raw, what) if isinstance(e, OSError) else BadInputError(f"{what} path is unusable: {e}")) from None
    roots = allowed_roots()
    if roots is not None and not _inside(real, roots):
        via = " (through a symbolic link)" if real != Path(os.path.abspath(raw)) else ""
        raise BadInputError(f"{what} {raw} is outside the allowed roots{via}",
                            hint=f"keep every file inside {', '.join(str(r) for r in roots)}")
    return real


def check(path: str | os.PathLike[str], *, what: str = "file", kind: Kind = "any", must_exist: bool = True) -> Path:
    """The confined real path of ``path``, checked to be a regular file / directory (not a FIFO or device)."""
    real = real_path(path, what=what)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if must_exist:
            raise BadInputError(f"{what} {os.fspath(path)} does not exist", hint="check the path") from None
        return real
    except OSError as e:
        raise os_error(e, path, what) from None
    _check_type(st, path, what, kind)
    return real


def _check_type(st: os.stat_result, path: str | os.PathLike[str], what: str, kind: Kind) -> None:
    if stat.S_ISREG(st.st_mode):
        if kind == "dir":
            raise BadInputError(f"{what} {os.fspath(path)} is a file, not a directory", hint="pass a directory")
        return
    if stat.S_ISDIR(st.st_mode):
        if kind == "file":
            raise BadInputError(f"{what} {os.fspath(path)} is a directory, not a file", hint="pass a file")
        return
    raise BadInputError(f"{what} {os.fspath(path)} is not a regular file (a FIFO, socket or device)",
                        hint="pass a regular file; special files are never read")


def _verify_fd(fd: int, path: str | os.PathLike[str], what: str) -> None:
    """The opened descriptor really lies inside the roots (catches a parent swapped for a link)."""
    roots = allowed_roots()
    if roots is None:
        return
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return  # no /proc: the resolve-then-O_NOFOLLOW check above is what we have
    if not _inside(opened, roots):
        raise BadInputError(f"{what} {os.fspath(path)} changed into a path outside the allowed roots while opening",
                            hint="something swapped a folder for a link; check the workspace")


def open_fd(path: str | os.PathLike[str], *, what: str = "file", kind: Kind = "file") -> int:
    """A read-only descriptor of the confined, regular file (or directory) ``path``; never blocks on a FIFO."""
    real = check(path, what=what, kind=kind)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if kind == "dir":
        flags |= os.O_DIRECTORY
    try:
        fd = os.open(real, flags)
    except OSError as e:
        raise os_error(e, path, what) from None
    try:
        _check_type(os.fstat(fd), path, what, kind)
        _verify_fd(fd, path, what)
        if kind != "dir":
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_read(path: str | os.PathLike[str], *, what: str = "file") -> IO[bytes]:
    """The confined regular file ``path`` opened for binary reading."""
    return os.fdopen(open_fd(path, what=what), "rb")


@contextlib.contextmanager
def opened_path(path: str | os.PathLike[str], *, what: str = "file") -> Iterator[str]:
    """A name for the checked, already-opened file (``/proc/self/fd/N``) for libraries that want a file
    name (``np.load(mmap_mode=...)``): they reopen exactly the file we checked, not whatever the path
    points at by then."""
    fd = open_fd(path, what=what)
    try:
        proc = f"/proc/self/fd/{fd}"
        yield proc if os.path.exists(proc) else str(check(path, what=what, kind="file"))
    finally:
        os.close(fd)


def size(path: str | os.PathLike[str], *, what: str = "file") -> int:
    return check(path, what=what, kind="file").stat().st_size


def read_bytes(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int | None = None) -> bytes:
    """The whole confined file, refusing one larger than ``max_bytes`` before reading it."""
    with open_read(path, what=what) as f:
        if max_bytes is not None:
            n = os.fstat(f.fileno()).st_size
            if n > max_bytes:
                raise BadInputError(f"{what} {os.fspath(path)} is {n} bytes, over the {max_bytes}-byte limit",
                                    hint="pass the file this tool writes, not a different or damaged one")
        try:
            return f.read()
        except OSError as e:
            raise os_error(e, path, what) from None


def read_text(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int | None = None,
              errors: str = "strict") -> str:
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise BadInputError(f"{what} {os.fspath(path)} is not UTF-8 text ({e.reason} at byte {e.start})",
                            hint="pass the text file this tool expects") from None


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_json(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> Any:
    """Strict JSON (no NaN/Infinity) from a confined regular file, as a typed error when it is not JSON."""
    text = read_text(path, what=what, max_bytes=max_bytes, errors="surrogateescape")
    try:
        return json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise BadInputError(f"{what} {os.fspath(path)} is nested too deeply", hint="pass the file this tool wrote") from None
    except ValueError as e:
        raise BadInputError(f"{what} {os.fspath(path)} is unreadable (not valid JSON: {e})", hint="pass the file this tool wrote") from None


def strict_json(data: Any, *, indent: int | None = 1) -> str:
    """JSON text that every parser accepts: NaN/Infinity are refused rather than written."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False)
    except ValueError as e:
        raise BadInputError(f"refusing to write non-standard JSON: {e}", hint="pass finite numbers") from None


# Folders this process claimed (real path -> O_DIRECTORY descriptor opened once at claim time). Every write
# below one of them goes through the descriptor (``dir_fd`` opens, ``O_NOFOLLOW`` on every component,
# rename within the descriptor), so swapping the folder, a parent or a subfolder for a symbolic link after
# the claim cannot redirect a write: it lands in the folder we claimed or is refused.
_claimed: dict[Path, int] = {}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _claimed_parts(path: str | os.PathLike[str]) -> tuple[int, Path, list[str]] | None:
    """The claimed folder holding ``path`` (lexically), its descriptor and the components below it."""
    if not _claimed:
        return None
    p = Path(os.path.abspath(os.fspath(path)))
    best: tuple[int, Path, list[str]] | None = None
    for base, fd in list(_claimed.items()):  # a snapshot: diagnose claims folders from two threads
        if p.is_relative_to(base) and (best is None or len(base.parts) > len(best[1].parts)):
            best = (fd, base, list(p.relative_to(base).parts))
    return best


def _walk_at(base_fd: int, base: Path, parts: Sequence[str], *, create: bool, what: str) -> int:
    """A new descriptor of the folder ``base/parts`` reached from ``base_fd`` without following any link."""
    fd = os.dup(base_fd)
    try:
        for i, part in enumerate(parts):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                shown = base.joinpath(*parts[: i + 1])
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise BadInputError(f"{what}: {shown} inside the claimed output folder {base} is a symbolic link "
                                        "or not a folder (changed after the folder was claimed)",
                                        hint="something replaced a folder of the run; start the run again in a new "
                                        "output directory") from None
                raise os_error(e, shown, what) from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _dir_fd_for(path: str | os.PathLike[str], what: str, *, create: bool = True) -> tuple[int, str, Path] | None:
    """(descriptor of the parent folder, final name, shown path) when ``path`` lies in a claimed folder."""
    found = _claimed_parts(path)
    if found is None:
        return None
    base_fd, base, parts = found
    if not parts or parts[-1] in ("", ".", ".."):
        return None
    _check_name(os.fspath(path), what)
    return _walk_at(base_fd, base, parts[:-1], create=create, what=what), parts[-1], base.joinpath(*parts)


def _write_all_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def make_dirs(path: str | os.PathLike[str], *, what: str = "output directory") -> Path:
    """``mkdir -p`` inside the roots: every component is checked, symlink loops and long names are typed errors."""
    found = _claimed_parts(path)
    if found is not None and found[2]:
        _check_name(os.fspath(path), what)
        os.close(_walk_at(found[0], found[1], found[2], create=True, what=what))
        return found[1].joinpath(*found[2])
    real = real_path(path, what=what)
    try:
        real.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise BadInputError(f"{what} {os.fspath(path)} exists and is not a directory", hint="choose another path") from None
    except OSError as e:
        raise os_error(e, path, what) from None
    return check(real, what=what, kind="dir")


def writable_path(path: str | os.PathLike[str], *, what: str = "output file") -> Path:
    """Where to write ``path``: its real parent (created, confined) joined with its own name.

    The final name is not resolved: a link there is replaced by the rename, never written through.
    """
    p = Path(os.fspath(path))
    _check_name(os.fspath(p), what)
    parent = make_dirs(p.parent if str(p.parent) else Path("."), what=f"folder of {what}")
    return parent / p.name


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, what: str = "output file") -> Path:
    """Write via a fresh temp file in the (confined) folder and rename: readers never see half a file,
    and a symlink planted at ``path`` is replaced, not followed."""
    import tempfile

    at = _dir_fd_for(path, what)
    if at is not None:
        return _atomic_write_at(*at, data, what=what)
    target = writable_path(path, what=what)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
    except OSError as e:
        raise os_error(e, target, what) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _atomic_write_at(dir_fd: int, name: str, shown: Path, data: bytes, *, what: str) -> Path:
    """The descriptor-relative form of :func:`atomic_write_bytes` (inside a claimed folder)."""
    import secrets

    tmp = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        except OSError as e:
            raise os_error(e, shown, what) from None
        try:
            _write_all_fd(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as e:
            raise os_error(e, shown, what) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(dir_fd)
    return shown


def atomic_write_text(path: str | os.PathLike[str], text: str, *, what: str = "output file") -> Path:
    return atomic_write_bytes(path, text.encode("utf-8", errors="surrogateescape"), what=what)


def open_new(path: str | os.PathLike[str], *, what: str = "output file") -> IO[bytes]:
    """A new file opened for writing: never an existing file or a link (``O_EXCL | O_NOFOLLOW``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    at = _dir_fd_for(path, what)
    if at is not None:
        dir_fd, name, shown = at
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            raise BadInputError(f"{what} {shown} already exists", hint="write into a fresh output directory") from None
        except OSError as e:
            raise os_error(e, shown, what) from None
        finally:
            os.close(dir_fd)
        return os.fdopen(fd, "wb")
    target = writable_path(path, what=what)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise BadInputError(f"{what} {target} already exists", hint="write into a fresh output directory") from None
    except OSError as e:
        raise os_error(e, target, what) from None
    return os.fdopen(fd, "wb")


def claim_dir(path: str | os.PathLike[str], *, what: str = "output directory", require_empty: bool = True) -> Path:
    """Make ``path`` this process's output directory before anything is written to it.

    Atomic: a missing directory is created with ``mkdir`` (fails if someone else made it first) and an
    existing one must be empty, then gets a claim file created with ``O_EXCL``. A second writer fails
    here, before touching a file. :func:`release_dir` removes the claim file when the output is complete.
    """
    inside = _claimed_parts(path)
    if inside is not None and inside[2]:  # a run folder inside a claimed folder (a baseline's reference run)
        _check_name(os.fspath(path), what)
        real = inside[1].joinpath(*inside[2])
        dir_fd = _walk_at(inside[0], inside[1], inside[2], create=True, what=what)
    else:
        target = writable_path(path, what=what)
        try:
            os.mkdir(target)
        except FileExistsError:
            pass
        except OSError as e:
            raise os_error(e, target, what) from None
        real = check(target, what=what, kind="dir")
        try:
            dir_fd = os.open(real, _DIR_FLAGS)
        except OSError as e:
            raise os_error(e, target, what) from None
    try:
        _verify_fd(dir_fd, real, what)
        try:
            fd = os.open(CLAIM_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
        except FileExistsError:
            raise BadInputError(f"{what} {real} is being written by another run",
                                hint="choose another output directory") from None
        except OSError as e:
            raise os_error(e, real, what) from None
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        others = [e.name for e in os.scandir(dir_fd) if e.name != CLAIM_FILE] if require_empty else []
        if others:
            with contextlib.suppress(OSError):
                os.unlink(CLAIM_FILE, dir_fd=dir_fd)
            raise BadInputError(f"{what} {real} is not empty ({', '.join(sorted(others)[:5])})",
                                hint="choose a new output directory")
    except BaseException:
        os.close(dir_fd)
        raise
    old_fd = _claimed.pop(real, None)
    if old_fd is not None:
        os.close(old_fd)
    _claimed[real] = dir_fd
    return real


def release_dir(path: str | os.PathLike[str]) -> None:
    """The output in ``path`` is complete: drop the claim file (through the claimed descriptor) and let go."""
    real = Path(os.path.abspath(os.fspath(path)))
    fd = _claimed.pop(real, None)
    if fd is None:
        with contextlib.suppress(OSError):
            os.unlink(Path(path) / CLAIM_FILE)
        return
    try:
        with contextlib.suppress(OSError):
            os.unlink(CLAIM_FILE, dir_fd=fd)
    finally:
        os.close(fd)


def is_claimed(path: str | os.PathLike[str]) -> bool:
    return os.path.lexists(Path(path) / CLAIM_FILE)


MAX_COPY_ENTRIES = 100_000


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, what: str = "file") -> Path:
    """Copy the confined regular file ``src`` to a new file ``dst`` (never over an existing file or link),
    keeping its permission bits (an executable stays executable)."""
    with open_read(src, what=what) as f_in:
        mode = stat.S_IMODE(os.fstat(f_in.fileno()).st_mode) & 0o755
        with open_new(dst, what=f"copy of {what}") as f_out:
            while chunk := f_in.read(1 << 20):
                f_out.write(chunk)
            os.fchmod(f_out.fileno(), mode | 0o600)
    return Path(dst)


def copy_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, what: str = "folder",
              exist_ok: bool = False) -> Path:
    """``shutil.copytree`` through this module: every entry of ``src`` is opened confined (a link leading
    out of the roots, a FIFO or a device is a typed error), files are created new in ``dst``."""
    count = 0

    def walk(s: Path, d: Path) -> None:
        nonlocal count
        check(s, what=what, kind="dir")
        made = make_dirs(d, what=f"copy of {what}")
        if not exist_ok and any(made.iterdir()):
            raise BadInputError(f"copy of {what} {d} already exists", hint="copy into a fresh folder")
        try:
            entries = sorted(os.scandir(s), key=lambda e: e.name)
        except OSError as e:
            raise os_error(e, s, what) from None
        for entry in entries:
            count += 1
            if count > MAX_COPY_ENTRIES:
                raise BadInputError(f"{what} {src} has more than {MAX_COPY_ENTRIES} entries",
                                    hint="pass the folder itself, not a parent of it")
            child = s / entry.name
            if check(child, what=what).is_dir():
                walk(child, d / entry.name)
            else:
                if exist_ok and os.path.lexists(d / entry.name):
                    os.unlink(d / entry.name)
                copy_file(child, d / entry.name, what=what)

    walk(Path(src), Path(dst))
    return Path(dst)
