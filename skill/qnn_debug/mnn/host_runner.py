"""Our own Module-API runner (``dump_runner.cpp``), built once per MNN build and run on the host.

ModuleBasic cannot switch QNN's intermediate dump on, so the host target compiles a small program of ours
against the user's MNN build: forward type 5 (QNN online), precision low, ``MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS``,
``shapeMutable`` false. The executable is cached per user under the user's cache dir, keyed by the runner's
source, the compiler, the build's ``libMNN*.so`` (size and mtime) and the QNN dump header; it is compiled into a
private name and renamed, so concurrent first uses never run half a file. MNN's headers come from the build's
``CMakeCache.txt`` (``MNN_SOURCE_DIR`` / ``CMAKE_HOME_DIRECTORY``) unless ``mnn_source_dir`` names them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .. import fs, process
from ..errors import BadInputError, TargetError

RUNNER_SOURCE = Path(__file__).with_name("dump_runner.cpp")
DUMP_FLAG = "MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS"
FORWARD_HEADER = Path("include", "MNN", "MNNForwardType.h")
RUNNER_NAME = "qnn-debug-mnn-runner"
_CACHE_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_]+):(?P<type>[A-Z]+)=(?P<value>.*)$")


class MnnBuild(BaseModel):
    """What the runner needs from a user's MNN build folder."""

    model_config = ConfigDict(frozen=True)

    build_dir: Path
    source_dir: Path
    libs: list[Path]  # libMNN.so and, in a separated build, express/libMNN_Express.so
    qnn: bool | None = Field(description="MNN_QNN from CMakeCache.txt (None: no cache file)")


class RunnerOutput(BaseModel):
    """One forward pass of the runner."""

    returncode: int
    log: str
    command: list[str]
    outputs: dict[str, list[int]] = Field(default_factory=dict)  # name -> shape, values in ``values``
    dump_dir: Path | None = None

    model_config = ConfigDict(arbitrary_types_allowed=True)


def read_cmake_cache(build_dir: Path) -> dict[str, str]:
    """``KEY:TYPE=VALUE`` lines of the build's CMakeCache.txt (empty when there is none)."""
    path = build_dir / "CMakeCache.txt"
    if not path.is_file():
        return {}
    out = {}
    for line in fs.read_text(path, what="CMakeCache.txt", max_bytes=8 << 20).splitlines():
        if m := _CACHE_LINE.match(line.strip()):
            out[m.group("key")] = m.group("value")
    return out


def inspect_build(build_dir: str | os.PathLike[str], source_dir: str | os.PathLike[str] | None = None) -> MnnBuild:
    """The build's libraries, MNN source folder and QNN switch, with a typed error saying what to do."""
    build = fs.check(build_dir, what="mnn_build_dir", kind="dir").absolute()
    cache = read_cmake_cache(build)
    qnn = None if not cache else cache.get("MNN_QNN", "OFF").upper() in ("ON", "1", "TRUE", "YES")
    if qnn is False:
        raise BadInputError(f"{build} was configured without the QNN backend (CMakeCache.txt: MNN_QNN=OFF)",
                            hint="configure MNN with -DMNN_QNN=ON -DQNN_SDK_ROOT=<QNN SDK> and build it, then pass "
                                 "that build folder as mnn_build_dir")
    lib = build / "libMNN.so"
    if not lib.is_file():
        raise BadInputError(f"{build} has no libMNN.so", hint="build MNN as a shared library (the default) with "
                            "-DMNN_QNN=ON and pass that build folder as mnn_build_dir")
    libs = [lib]
    express = build / "express" / "libMNN_Express.so"
    if express.is_file():
        libs.append(express)
    where = source_dir or cache.get("MNN_SOURCE_DIR") or cache.get("CMAKE_HOME_DIRECTORY")
    if not where:
        raise BadInputError(f"cannot tell where MNN's sources are for {build} (no CMakeCache.txt naming them)",
                            hint="add --option mnn_source_dir=<the MNN source folder the build was made from>")
    src = Path(where)
    header = src / FORWARD_HEADER
    if not header.is_file():
        raise BadInputError(f"{src} holds no {FORWARD_HEADER} (MNN's headers)",
                            hint="add --option mnn_source_dir=<the MNN source folder the build was made from>")
    if DUMP_FLAG not in fs.read_text(header, what="MNNForwardType.h", max_bytes=1 << 20):
        raise BadInputError(f"this MNN ({src}) has no {DUMP_FLAG}: its QNN backend cannot dump intermediate tensors",
                            hint="update MNN to a version whose include/MNN/MNNForwardType.h defines it, rebuild, "
                                 "or use the offline path (--option mnn2qnn=... --option qnn_sdk=...)")
    return MnnBuild(build_dir=build, source_dir=src, libs=libs, qnn=qnn)


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``g++``, else ``clang++``."""
    named = os.environ.get("CXX")
    cxx = shutil.which(named) if named else (shutil.which("g++") or shutil.which("clang++"))
    if not cxx:
        raise TargetError("no C++ compiler found" + (f" (CXX={named} is not an executable)" if named else "")
                          + ": the host target builds a small runner of its own against your MNN build",
                          hint="install g++ (e.g. `apt-get install g++`) or set CXX to a C++14 compiler")
    return cxx


def runner_key(build: MnnBuild, cxx: str) -> str:
    """What the cached executable depends on: our source, the compiler, the build's libraries and headers."""
    h = hashlib.sha256(RUNNER_SOURCE.read_bytes())
    h.update(cxx.encode())
    h.update(str(build.build_dir).encode())
    for lib in build.libs:
        st = lib.stat()
        h.update(f"{lib.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update((build.source_dir / FORWARD_HEADER).read_bytes())
    return h.hexdigest()[:16]


def cache_dirs() -> list[Path]:
    """The user's cache, else a private folder in the temp dir (never relative to the cwd)."""
    home = os.path.expanduser("~")
    base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(home, ".cache") if os.path.isabs(home) else "")
    dirs = [Path(base) / "qnn-debug" / "mnn-runner"] if os.path.isabs(base) else []
    return [*dirs, Path(tempfile.gettempdir()) / f"qnn-debug-{os.getuid()}" / "mnn-runner"]


def build_runner(build: MnnBuild, *, timeout: float = 600.0) -> Path:
    """The runner for ``build``: the cached executable, or compiled now (once per build and runner source)."""
    cxx = compiler()
    key = runner_key(build, cxx)
    problems = []
    for folder in cache_dirs():
        exe = folder / f"{RUNNER_NAME}-{key}"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
        why = _compile(cxx, build, folder, exe, timeout)
        if not why:
            return exe
        if why.startswith("compile:"):
            raise TargetError(f"the runner did not compile against {build.build_dir}: {why[8:].strip()}",
                              hint="check that mnn_build_dir and its MNN sources (mnn_source_dir) are the same "
                                   "MNN version and that the build finished (libMNN.so links)",
                              details={"compiler": cxx, "source_dir": str(build.source_dir)})
        problems.append(why)
    raise TargetError("no writable cache folder for the runner: " + "; ".join(problems),
                      hint="set XDG_CACHE_HOME to a folder you own")


def _compile(cxx: str, build: MnnBuild, folder: Path, exe: Path, timeout: float) -> str:
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner = folder.stat().st_uid
    except OSError as e:
        return f"cannot create {folder}: {e.strerror}"
    if owner != os.getuid():
        return f"{folder} belongs to another user"
    tmp = folder / f".{exe.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    lib_dirs = sorted({str(lib.parent) for lib in build.libs})
    argv = [cxx, "-std=c++14", "-O1", str(RUNNER_SOURCE), "-I", str(build.source_dir / "include"),
            *[f"-L{d}" for d in lib_dirs], *[f"-l{lib.stem[3:]}" for lib in build.libs],
            f"-Wl,-rpath,{':'.join(lib_dirs)}", "-o", str(tmp)]
    try:
        try:
            done = process.run(argv, timeout=timeout, merge_stderr=True)
        except process.ChildTimeout:
            return f"compile: {cxx} did not finish within {timeout:.0f} s"
        except OSError as e:
            return f"compile: cannot start {cxx}: {e}"
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.text.splitlines() if ln.strip()]
            errors = [ln for ln in lines if "error" in ln.lower()] or lines[-6:]
            return f"compile: {' | '.join(errors[:4])[-800:] or done.status()}"
        os.replace(tmp, exe)
        return ""
    finally:
        tmp.unlink(missing_ok=True)


def run_runner(exe: Path, model: Path, inputs: dict[str, np.ndarray], outputs: list[str], work: Path, *,
               env: dict[str, str], timeout: float, forward: int = 5, precision: int = 2,
               dump: bool = True) -> tuple[RunnerOutput, dict[str, np.ndarray]]:
    """One forward pass in ``work``: inputs as float32 files, QNN's dump in ``work/dump``, outputs read back."""
    feed = fs.make_dirs(work / "inputs", what="runner inputs")
    out_dir = fs.make_dirs(work / "outputs", what="runner outputs")
    dump_dir = work / "dump"
    lines = []
    for i, (name, arr) in enumerate(inputs.items()):
        if "\t" in name or "\n" in name:
            raise BadInputError(f"input name {name!r} holds a tab or newline", hint="rename the model's input")
        path = feed / f"{i}.f32"
        np.ascontiguousarray(arr, dtype=np.float32).tofile(path)
        lines.append("\t".join(["input", name, str(path), str(arr.ndim), *(str(int(d)) for d in arr.shape)]))
    for name in outputs:
        lines.append(f"output\t{name}")
    spec = work / "spec.tsv"
    spec.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = [str(exe), str(model.absolute()), str(spec), str(out_dir.absolute()), str(forward), str(precision),
            "1" if dump else "0"]
    command, _ = process.unbuffered(argv)  # our runner unbuffers itself; MNN's own writes too under stdbuf
    full_env = {**process.environ(), **env, "MNN_QNN_DUMP_DIR": str(dump_dir)}
    try:
        done = process.run(command, cwd=str(work), env=full_env, timeout=timeout, merge_stderr=True)
    except process.ChildTimeout as e:
        raise TargetError(f"the MNN runner did not finish within {timeout:.0f} s", hint="raise --timeout",
                          details={"log_tail": e.output[-3000:]}) from None
    except OSError as e:
        raise TargetError(f"cannot start the MNN runner: {e}", hint="remove the cached runner and run again") from None
    result = RunnerOutput(returncode=done.returncode, log=done.text, command=argv,
                          dump_dir=dump_dir if dump_dir.is_dir() else None)
    values = _read_outputs(out_dir, result)
    return result, values


def _read_outputs(out_dir: Path, result: RunnerOutput) -> dict[str, np.ndarray]:
    table = out_dir / "outputs.tsv"
    values: dict[str, np.ndarray] = {}
    if not table.is_file():
        return values
    for line in table.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, file, rank = parts[0], parts[1], int(parts[2])
        shape = [int(d) for d in parts[3:3 + rank]]
        raw = np.fromfile(out_dir / Path(file).name, dtype=np.float32)
        if raw.size != int(np.prod(shape, dtype=np.int64)):
            continue
        values[name] = raw.reshape(shape)
        result.outputs[name] = shape
    return values
