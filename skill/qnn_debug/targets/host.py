"""The ``host`` target: MNN's QNN backend from a local MNN build (e.g. x86_64 with the HTP simulator libs).

Options: ``mnn_build_dir`` (required: ``libMNN*.so`` of a build with ``MNN_QNN=ON``; ``ModuleBasic.out`` for
``run``, probes and the offline chain), ``qnn_lib_dir`` (directory with ``libQnnHtp.so``/``libQnnSystem.so``;
put first on ``LD_LIBRARY_PATH``), ``mnn_source_dir`` (MNN's sources, when the build's CMakeCache.txt does not
name them), plus the common options of :mod:`qnn_debug.mnn.capture` (``qnn_sdk`` reaches every MNN tool).

``dump`` on the online path (the default unless MNN2QNNModel or a prebuilt debug model is given) runs our own
Module-API runner (:mod:`qnn_debug.mnn.online_dump`): every intermediate tensor, from an ``.mnn`` or an
``.onnx`` converted here, no SDK tools needed. ModuleBasic runs copy the model and test dir into a fresh local
directory, exactly like the device target does on a phone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

from .. import fs, process
from ..errors import BadInputError, TargetError
from ..progress import Progress
from ..runstore import Run
from . import DumpRequest
from .base import Capabilities, ProbeSetup, Target
from .mnn_probe import MnnProber

if TYPE_CHECKING:
    from ..mnn.capture import CaptureOptions

OWN_OPTIONS = {"mnn_build_dir", "qnn_lib_dir", "mnn_source_dir"}
PROBE_OPTIONS = {"mnn_build_dir", "qnn_lib_dir", "qnn_sdk"}


class LocalExecutor:
    """Runs ModuleBasic from a local build in a fresh temporary run directory."""

    kind = "host"

    def __init__(self, build_dir: Path, qnn_lib_dir: Path | None, qnn_sdk: Path | None = None):
        self.build_dir = build_dir.absolute()
        self.qnn_sdk = qnn_sdk
        self.qnn_lib_dir = qnn_lib_dir.absolute() if qnn_lib_dir else None
        self.module_basic = str(self.build_dir / "ModuleBasic.out")
        self.run_dir = ""

    def begin(self) -> str:
        self._scratch = fs.scratch("qnn-debug-host-run-")
        self.run_dir = str(self._scratch.__enter__())
        return self.run_dir

    def join(self, *parts: str) -> str:
        path = Path(self.run_dir, *parts)
        root = Path(self.run_dir).resolve()
        if path.resolve() != root and root not in path.resolve().parents:
            raise BadInputError(f"path {path} leaves the run directory", hint="use plain file names")
        return str(path)

    def mkdir(self, target_path: str) -> None:
        Path(target_path).mkdir(parents=True, exist_ok=True)

    def put(self, local: Path, target_path: str) -> None:
        dst = Path(target_path)
        if dst.exists():
            raise TargetError(f"{dst} already exists in a fresh run directory", hint="report this as a bug")
        if fs.check(local, what="file to run with").is_dir():
            fs.copy_tree(local, dst, what="folder to run with")
        else:
            fs.copy_file(local, dst, what="file to run with")

    def execute(self, argv: list[str], *, cwd: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
        full_env = {**process.environ(), **env}
        command, _ = process.unbuffered(argv)  # a crash must not take ModuleBasic's last lines with it
        try:
            done = process.run(command, cwd=cwd, env=full_env, timeout=timeout, merge_stderr=True)
        except process.ChildTimeout as e:
            raise TargetError(f"ModuleBasic did not finish within {timeout:.0f} s", hint="raise --timeout",
                              details={"log_tail": e.output[-2000:]}) from None
        except OSError as e:
            raise TargetError(f"cannot start {argv[0]}: {e}", hint="is it an executable built for this machine?") from None
        return done.returncode, done.text

    def fetch(self, target_path: str, local: Path) -> bool:
        src = Path(target_path)
        if not os.path.lexists(src):
            return False
        if fs.check(src, what="ModuleBasic output").is_dir():
            fs.copy_tree(src, local, what="ModuleBasic output", exist_ok=True)
        else:
            fs.make_dirs(local.parent)
            fs.copy_file(src, local, what="ModuleBasic output")
        return True

    def finish(self, keep: bool) -> None:
        if self.run_dir and not keep:
            self._scratch.__exit__(None, None, None)

    def base_env(self) -> dict[str, str]:
        return tool_env(self.build_dir, self.qnn_lib_dir, self.qnn_sdk)


def tool_env(build_dir: Path, qnn_lib_dir: Path | None, qnn_sdk: Path | None) -> dict[str, str]:
    """What every MNN tool of the build runs with: ``QNN_SDK_ROOT`` (``--option qnn_sdk`` reaches every MNN tool,
    not only MNN2QNNModel) and the QNN and MNN libraries first on ``LD_LIBRARY_PATH``."""
    sdk = process.qnn_sdk_env(qnn_sdk)
    dirs = [str(d) for d in (qnn_lib_dir, build_dir, build_dir / "express") if d is not None]
    old = sdk.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH")
    return {**sdk, "LD_LIBRARY_PATH": os.pathsep.join(dirs + ([old] if old else []))}


def _build_dir(own: dict[str, str]) -> Path:
    build = own.get("mnn_build_dir")
    if not build:
        raise BadInputError("the host target needs an MNN build directory",
                            hint="add --option mnn_build_dir=<MNN build dir> (built with -DMNN_QNN=ON)")
    return fs.check(build, what="mnn_build_dir", kind="dir")


def _lib_dir(own: dict[str, str]) -> Path | None:
    lib = own.get("qnn_lib_dir")
    lib_dir = fs.check(lib, what="qnn_lib_dir", kind="dir") if lib else None
    if lib_dir is not None and not fs.check(lib_dir / "libQnnHtp.so", what="libQnnHtp.so", must_exist=False).is_file():
        raise BadInputError(f"{lib_dir} has no libQnnHtp.so", hint="pass the directory holding the x86_64 QNN libraries")
    return lib_dir.absolute() if lib_dir is not None else None


def make_executor(own: dict[str, str], qnn_sdk: Path | None = None) -> LocalExecutor:
    build_dir = _build_dir(own)
    if not fs.check(build_dir / "ModuleBasic.out", what="ModuleBasic.out", must_exist=False).is_file():
        raise BadInputError(f"{build_dir} has no ModuleBasic.out",
                            hint="build MNN with -DMNN_BUILD_TOOLS=ON -DMNN_QNN=ON and pass that build directory")
    return LocalExecutor(build_dir, _lib_dir(own), qnn_sdk)


def run(request: DumpRequest, progress: Progress) -> Run:
    """Every tensor: online through our own runner (from .mnn or .onnx), offline through MNN2QNNModel and the
    local build's ModuleBasic; the result is imported into a run directory."""
    from ..mnn.capture import capture, plan, split_options
    from ..mnn.soc import resolve

    opts, own = split_options(request.options, OWN_OPTIONS)
    if _runs_online(Path(request.model), opts):
        return _online(request, opts, own, progress)
    plan(Path(request.model), opts, request.precision)
    executor = make_executor(own, opts.qnn_sdk)
    soc, arch = resolve(request.soc_model, request.htp_arch)
    _, buffered = process.unbuffered([])
    return capture(request, executor, opts, progress, target="host", soc_model=soc, htp_arch=arch,
                   warnings=[buffered] if buffered else None, extra={"mnn_build_dir": str(executor.build_dir)},
                   dump_hint="`qnn-debug dump --target host` runs qnn-debug's own MNN runner, which dumps every tensor")


def _runs_online(model: Path, opts: CaptureOptions) -> bool:
    """The online runner unless the user asked for ModuleBasic's offline chain (or handed us its pieces)."""
    if opts.runner == "modulebasic":
        return False
    offline_parts = opts.mnn2qnn is not None or opts.plugin_model is not None or opts.source_model is not None
    if model.suffix.lower() == ".onnx":
        if offline_parts or opts.mode == "offline":
            raise BadInputError("the offline chain (MNN2QNNModel, ModuleBasic) takes an .mnn model, not an .onnx",
                                hint="give the .mnn (diagnose: --mnn-model yours.mnn), or drop mnn2qnn/plugin_model/"
                                     "mode=offline to run the .onnx online through qnn-debug's own runner")
        return True
    if opts.runner == "own":
        return True
    return opts.mode == "online" or (opts.mode == "auto" and not offline_parts)


def _online(request: DumpRequest, opts: CaptureOptions, own: dict[str, str], progress: Progress) -> Run:
    from ..mnn.host_runner import inspect_build
    from ..mnn.online_dump import online_dump
    from ..mnn.soc import resolve

    if opts.forward not in (None, 5) or (opts.mnn_precision or "low") != "low":
        raise BadInputError("the host's all-tensor dump runs QNN online (forward type 5) at precision low",
                            hint="drop --option forward / mnn_precision, or use `qnn-debug run` for other settings")
    build = inspect_build(_build_dir(own), own.get("mnn_source_dir"))
    soc, arch = resolve(request.soc_model, request.htp_arch)
    return online_dump(request, build, env=tool_env(build.build_dir, _lib_dir(own), opts.qnn_sdk),
                       testdir=opts.testdir, progress=progress, soc_model=soc, htp_arch=arch, notes=[],
                       extra={"mnn_build_dir": str(build.build_dir)})


class HostOptions(BaseModel):
    """The ``--option`` keys a probe on the local build reads."""

    model_config = ConfigDict(extra="forbid")

    mnn_build_dir: str | None = None
    qnn_lib_dir: str | None = None
    qnn_sdk: str | None = None  # QNN_SDK_ROOT and its libraries for every MNN tool the probes start


class HostTarget(Target):
    """MNN's QNN backend from a local build: like the phone, without adb."""

    name: ClassVar[str] = "host"
    description: ClassVar[str] = "MNN's QNN backend from a local MNN build dir (e.g. x86_64 + HTP simulator libs)"
    capabilities: ClassVar[Capabilities] = Capabilities(own_reference=True, takes_settings=True, module_basic=True,
                                                          runs_mnn=True)
    options_model: ClassVar[type[BaseModel]] = HostOptions

    def options(self, options: dict[str, str]) -> HostOptions:
        from .device import check_probe_options

        check_probe_options(self.name, options, PROBE_OPTIONS)
        return HostOptions.model_validate(options)

    def dump(self, request: DumpRequest, progress: Progress) -> Run:
        return run(request, progress)

    def prober(self, setup: ProbeSetup) -> MnnProber:
        opts = self.options(setup.options)
        return MnnProber(make_executor(setup.options, Path(opts.qnn_sdk) if opts.qnn_sdk else None), setup)


TARGET = HostTarget()
