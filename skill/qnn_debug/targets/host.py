"""The ``host`` target: MNN's QNN backend from a local MNN build (e.g. x86_64 with the HTP simulator libs).

Options: ``mnn_build_dir`` (required: holds ``ModuleBasic.out`` and ``libMNN*.so`` of a build with
``MNN_QNN=ON``), ``qnn_lib_dir`` (directory with ``libQnnHtp.so``/``libQnnSystem.so``; put first on
``LD_LIBRARY_PATH``), plus the common options of :mod:`qnn_debug.mnn.capture`. Each run copies the
model and test dir into a fresh local directory, exactly like the device target does on a phone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from .. import fs, process
from ..errors import BadInputError, TargetError
from ..progress import Progress
from ..runstore import Run
from . import DumpRequest
from .base import Capabilities, ProbeSetup, Target
from .mnn_probe import MnnProber

OWN_OPTIONS = {"mnn_build_dir", "qnn_lib_dir"}


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
        sdk = process.qnn_sdk_env(self.qnn_sdk)  # --option qnn_sdk reaches every MNN tool, not only MNN2QNNModel
        dirs = [str(d) for d in (self.qnn_lib_dir, self.build_dir) if d is not None]
        old = sdk.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH")
        return {**sdk, "LD_LIBRARY_PATH": os.pathsep.join(dirs + ([old] if old else []))}


def make_executor(own: dict[str, str], qnn_sdk: Path | None = None) -> LocalExecutor:
    build = own.get("mnn_build_dir")
    if not build:
        raise BadInputError("the host target needs an MNN build directory",
                            hint="add --option mnn_build_dir=<MNN build dir with ModuleBasic.out> (built with -DMNN_QNN=ON)")
    build_dir = fs.check(build, what="mnn_build_dir", kind="dir")
    if not fs.check(build_dir / "ModuleBasic.out", what="ModuleBasic.out", must_exist=False).is_file():
        raise BadInputError(f"{build_dir} has no ModuleBasic.out",
                            hint="build MNN with -DMNN_BUILD_TOOLS=ON -DMNN_QNN=ON and pass that build directory")
    lib = own.get("qnn_lib_dir")
    lib_dir = fs.check(lib, what="qnn_lib_dir", kind="dir") if lib else None
    if lib_dir is not None and not fs.check(lib_dir / "libQnnHtp.so", what="libQnnHtp.so", must_exist=False).is_file():
        raise BadInputError(f"{lib_dir} has no libQnnHtp.so", hint="pass the directory holding the x86_64 QNN libraries")
    return LocalExecutor(build_dir, lib_dir, qnn_sdk)


def run(request: DumpRequest, progress: Progress) -> Run:
    """Run the model with the local build's ModuleBasic (dumping when offline) and import the result."""
    from ..mnn.capture import capture, plan, split_options
    from ..mnn.soc import resolve

    opts, own = split_options(request.options, OWN_OPTIONS)
    plan(Path(request.model), opts, request.precision)
    executor = make_executor(own, opts.qnn_sdk)
    soc, arch = resolve(request.soc_model, request.htp_arch)
    _, buffered = process.unbuffered([])
    return capture(request, executor, opts, progress, target="host", soc_model=soc, htp_arch=arch,
                   warnings=[buffered] if buffered else None, extra={"mnn_build_dir": str(executor.build_dir)})


class HostOptions(BaseModel):
    """The ``--option`` keys a probe on the local build reads."""

    model_config = ConfigDict(extra="forbid")

    mnn_build_dir: str | None = None
    qnn_lib_dir: str | None = None


class HostTarget(Target):
    """MNN's QNN backend from a local build: like the phone, without adb."""

    name: ClassVar[str] = "host"
    description: ClassVar[str] = "MNN's QNN backend from a local MNN build dir (e.g. x86_64 + HTP simulator libs)"
    capabilities: ClassVar[Capabilities] = Capabilities(own_reference=True, takes_settings=True, module_basic=True)
    options_model: ClassVar[type[BaseModel]] = HostOptions

    def options(self, options: dict[str, str]) -> HostOptions:
        from .device import check_probe_options

        check_probe_options(self.name, options, OWN_OPTIONS)
        return HostOptions.model_validate(options)

    def dump(self, request: DumpRequest, progress: Progress) -> Run:
        return run(request, progress)

    def prober(self, setup: ProbeSetup) -> MnnProber:
        self.options(setup.options)
        return MnnProber(make_executor(setup.options), setup)


TARGET = HostTarget()
