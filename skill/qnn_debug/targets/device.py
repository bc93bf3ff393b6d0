"""The ``device`` target: MNN's QNN backend on an Android phone, driven over adb with ModuleBasic.

Options (``--option key=value``): ``serial`` (which phone; never taken from the environment), ``adb``
(the adb executable), ``mnn_dir`` (device directory holding ModuleBasic.out, libMNN*.so and the QNN
libraries; default ``/data/local/tmp/qnn-debug/bin``) plus the common ones of
:mod:`qnn_debug.mnn.capture`. The phone is probed first: a missing library stops the run with the
``adb push`` that fixes it, and the SoC / HTP arch come from the phone, not from defaults.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from ..device.adb import DEVICE_BASE, Adb, device_path
from ..errors import BadInputError, DeviceError
from ..progress import Progress
from ..runstore import Run
from . import DumpRequest
from .base import Capabilities, ProbeSetup, Target
from .mnn_probe import MnnProber

DEFAULT_MNN_DIR = f"{DEVICE_BASE}/bin"
OWN_OPTIONS = {"serial", "adb", "mnn_dir", "qnn_sdk_android", "mnn_android_build", "ndk"}
PROBE_OPTIONS = {"serial", "adb", "mnn_dir"}  # what a cut-model probe reads


class AdbExecutor:
    """Runs ModuleBasic in a fresh ``/data/local/tmp/qnn-debug/runs/<id>`` directory on the phone."""

    kind = "device"

    def __init__(self, adb: Adb, mnn_dir: str, *, runs_base: str = f"{DEVICE_BASE}/runs", timeout: float = 600.0):
        self.adb = adb
        self.mnn_dir = mnn_dir
        self.module_basic = device_path(mnn_dir, "ModuleBasic.out")
        self.runs_base = runs_base
        self.timeout = timeout
        self.run_dir = ""

    def begin(self) -> str:
        self.run_dir = device_path(self.runs_base, uuid.uuid4().hex[:12])
        self.adb.mkdir(self.run_dir)
        return self.run_dir

    def join(self, *parts: str) -> str:
        return device_path(self.run_dir, *parts)

    def mkdir(self, target_path: str) -> None:
        self.adb.mkdir(target_path)

    def put(self, local: Path, target_path: str) -> None:
        self.adb.push(local, target_path, timeout=self.timeout)

    def execute(self, argv: list[str], *, cwd: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
        res = self.adb.shell(argv, cwd=cwd, env=env, timeout=timeout)
        return res.returncode, res.output

    def fetch(self, target_path: str, local: Path) -> bool:
        if not self.adb.exists([target_path])[target_path]:
            return False
        self.adb.pull(target_path, local, timeout=self.timeout)
        return True

    def finish(self, keep: bool) -> None:
        if self.run_dir and not keep:
            self.adb.remove_tree(self.run_dir)

    def base_env(self) -> dict[str, str]:
        # QNN's documented form: the DSP looks for the Skel library along ';'-separated ADSP_LIBRARY_PATH.
        return {"LD_LIBRARY_PATH": self.mnn_dir,
                "ADSP_LIBRARY_PATH": f"{self.mnn_dir};/vendor/lib/rfsa/adsp;/system/lib/rfsa/adsp;/vendor/dsp/cdsp;/dsp"}


def make_adb(options: dict[str, str], timeout: float = 60.0) -> Adb:
    return Adb(options.get("serial") or None, adb=options.get("adb") or "adb", timeout=timeout)


def run(request: DumpRequest, progress: Progress) -> Run:
    """Probe the phone, run the model with ModuleBasic (dumping when offline), pull and import the result."""
    from ..device.probe import probe_device
    from ..mnn.capture import capture, plan, split_options
    from ..mnn.soc import resolve

    opts, own = split_options(request.options, OWN_OPTIONS)
    if opts.runner == "own":
        raise BadInputError("runner=own (qnn-debug's own MNN runner) is built on the host only",
                            hint="drop --option runner, or use --target host with a local MNN build")
    p, _ = plan(Path(request.model), opts, request.precision)  # fail on bad input before touching the phone
    adb = make_adb(own)
    mnn_dir = own.get("mnn_dir") or DEFAULT_MNN_DIR
    with progress.stage("device: probe", total=None, message="device: probing the phone"):
        probe = probe_device(adb, mnn_dir=mnn_dir, qnn_sdk=own.get("qnn_sdk_android"), mnn_build=own.get("mnn_android_build"),
                             ndk=own.get("ndk"), mode=p.mode)
    missing = [f for f in probe.missing if f.needed_for in ("all", p.mode)]
    if missing:
        raise DeviceError(
            f"{probe.serial} lacks {', '.join(f.name for f in missing)} in {mnn_dir}",
            hint="push them: " + " ; ".join(f.push or "" for f in missing),
            details={"probe": probe.model_dump(mode="json")},
        )
    warnings: list[str] = []
    if probe.soc_id is not None and probe.htp_arch is not None:
        soc, arch = probe.soc_id, probe.htp_arch
        if request.soc_model not in (soc, DumpRequest.model_fields["soc_model"].default):  # the default says nothing
            warnings.append(f"--soc {request.soc_model} ignored: the phone is {probe.soc_name} (soc {soc}, v{arch})")
    else:
        if request.htp_arch is None:
            raise BadInputError(f"cannot tell the HTP arch of {probe.soc_part or 'this phone'}",
                                hint="pass --soc and --arch for this SoC")
        soc, arch = resolve(request.soc_model, request.htp_arch)
    executor = AdbExecutor(adb, mnn_dir, timeout=max(request.timeout, 60.0))
    return capture(request, executor, opts, progress, target="device", soc_model=soc, htp_arch=arch, warnings=warnings,
                   extra={"serial": probe.serial, "device_model": probe.model, "soc_part": probe.soc_part})


class ProbeOptions(BaseModel):
    """The ``--option`` keys a probe on the phone reads."""

    model_config = ConfigDict(extra="forbid")

    serial: str | None = None
    adb: str | None = None
    mnn_dir: str | None = None


def check_probe_options(target: str, options: dict[str, str], allowed: set[str]) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise BadInputError(f"bisect on {target} does not take the option(s) {', '.join(unknown)}",
                            hint="allowed: " + ", ".join(sorted(allowed)))


class DeviceTarget(Target):
    """MNN's QNN backend on a phone: dumps through ModuleBasic/MNN2QNNModel, probes with its own CPU reference."""

    name: ClassVar[str] = "device"
    description: ClassVar[str] = "MNN's QNN backend on an Android phone over adb"
    capabilities: ClassVar[Capabilities] = Capabilities(own_reference=True, takes_settings=True, module_basic=True,
                                                          over_adb=True, runs_mnn=True)
    options_model: ClassVar[type[BaseModel]] = ProbeOptions

    def options(self, options: dict[str, str]) -> ProbeOptions:
        check_probe_options(self.name, options, PROBE_OPTIONS)
        return ProbeOptions.model_validate(options)

    def dump(self, request: DumpRequest, progress: Progress) -> Run:
        return run(request, progress)

    def prober(self, setup: ProbeSetup) -> MnnProber:
        from ..device.probe import probe_device

        own = self.options(setup.options)
        adb = make_adb(setup.options)
        mnn_dir = own.mnn_dir or DEFAULT_MNN_DIR
        found = probe_device(adb, mnn_dir=mnn_dir, mode="online")
        missing = [f for f in found.missing if f.needed_for in ("all", "online")]
        if missing:
            raise DeviceError(f"{found.serial} lacks {', '.join(f.name for f in missing)} in {mnn_dir}",
                              hint="push them: " + " ; ".join(f.push or "" for f in missing))
        return MnnProber(AdbExecutor(adb, mnn_dir, timeout=max(setup.timeout, 60.0)), setup)


TARGET = DeviceTarget()
