"""What a phone has for MNN's QNN backend: SoC, HTP arch, and which runtime files are in place.

The file list follows MNN's ``docs/inference/npu.md``: ``ModuleBasic.out`` and ``libMNN.so`` from an
Android build with ``MNN_QNN=ON``; from the QNN SDK ``libQnnHtp.so``, ``libQnnHtpV<arch>Stub.so``
(``lib/aarch64-android``), ``libQnnHtpV<arch>Skel.so`` (``lib/hexagon-v<arch>/unsigned``),
``libQnnSystem.so`` (offline/plugin models) and ``libQnnHtpPrepare.so`` (online graphs); and the NDK's
``libc++_shared.so``. Each missing file comes with the ``adb push`` that fixes it.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, Field

from ..mnn.soc import soc_by_part
from .adb import Adb, device_path, shell_join


class DeviceFile(BaseModel):
    name: str
    path: str
    present: bool
    needed_for: str  # "all", "online", "offline"
    push: str | None = None  # the command that installs it, when missing


class ProbeResult(BaseModel):
    serial: str
    model: str | None = None
    soc_part: str | None = None  # ro.soc.model, e.g. SM8650
    platform: str | None = None  # ro.board.platform
    soc_name: str | None = None
    soc_id: int | None = None
    htp_arch: int | None = None
    abi: str | None = None
    mnn_dir: str
    files: list[DeviceFile] = Field(default_factory=list)
    ready: bool = False
    notes: list[str] = Field(default_factory=list)

    @property
    def missing(self) -> list[DeviceFile]:
        return [f for f in self.files if not f.present]


def _sources(arch: int | None, sdk: str, mnn_build: str, ndk: str) -> dict[str, tuple[str, str]]:
    """file name → (local source path for the push command, needed for); roots are quoted or placeholders."""
    a = str(arch) if arch else "<arch>"
    s = str(arch) if arch else ARCH_VAR  # in shell text: a variable that stops with a message when unset
    return {
        "ModuleBasic.out": (f"{mnn_build}/ModuleBasic.out", "all"),
        "libMNN.so": (f"{mnn_build}/libMNN.so", "all"),
        "libc++_shared.so": (f"{ndk}/toolchains/llvm/prebuilt/linux-x86_64/sysroot/usr/lib/aarch64-linux-android/libc++_shared.so",
                             "all"),
        "libQnnHtp.so": (f"{sdk}/lib/aarch64-android/libQnnHtp.so", "all"),
        "libQnnSystem.so": (f"{sdk}/lib/aarch64-android/libQnnSystem.so", "offline"),
        f"libQnnHtpV{a}Stub.so": (f"{sdk}/lib/aarch64-android/libQnnHtpV{s}Stub.so", "all"),
        f"libQnnHtpV{a}Skel.so": (f"{sdk}/lib/hexagon-v{s}/unsigned/libQnnHtpV{s}Skel.so", "all"),
        "libQnnHtpPrepare.so": (f"{sdk}/lib/aarch64-android/libQnnHtpPrepare.so", "online"),
    }


def probe_device(adb: Adb, *, mnn_dir: str, qnn_sdk: str | None = None, mnn_build: str | None = None,
                 ndk: str | None = None, mode: str = "offline") -> ProbeResult:
    """Ask the phone for its SoC and check every file a ModuleBasic QNN run needs in ``mnn_dir``."""
    serial = adb.resolve_serial()
    props = _props(adb, ["ro.product.model", "ro.soc.model", "ro.board.platform", "ro.product.cpu.abi"])
    result = ProbeResult(serial=serial, model=props[0] or None, soc_part=props[1] or None, platform=props[2] or None,
                         abi=props[3] or None, mnn_dir=mnn_dir)
    soc = soc_by_part(result.soc_part) if result.soc_part else None
    if soc is not None:
        result.soc_name, result.soc_id, result.htp_arch = soc.name, soc.soc_id, soc.htp_arch
    else:
        result.notes.append(f"SoC {result.soc_part or result.platform or 'unknown'} is not in the SoC table: "
                            "pass --soc and --arch yourself")
    sources = _sources(result.htp_arch, _root(qnn_sdk, "$QNN_SDK_ROOT"), _root(mnn_build, "$MNN_ANDROID_BUILD"),
                       _root(ndk, "$ANDROID_NDK"))
    paths = {name: device_path(mnn_dir, name) for name in sources if "<arch>" not in name}
    present = adb.exists(list(paths.values()))
    for name, (src, needed) in sources.items():
        path = paths.get(name)
        here = bool(path and present.get(path))
        push = None if here else f"adb -s {shlex.quote(serial)} push {src} {shlex.quote(mnn_dir + '/')}"
        result.files.append(DeviceFile(name=name, path=path or device_path(mnn_dir, name.replace("<arch>", "XX")),
                                       present=here, needed_for=needed, push=push))
    result.ready = all(f.present for f in result.files if f.needed_for in ("all", mode)) and result.htp_arch is not None
    if result.abi and not result.abi.startswith("arm64"):
        result.notes.append(f"ABI {result.abi}: MNN's QNN backend needs an arm64-v8a build")
    return result


ARCH_VAR = '"${HTP_ARCH:?set HTP_ARCH to the phone HTP arch, e.g. 75}"'


def _root(given: str | None, placeholder: str) -> str:
    """A user's directory, quoted for pasting into a shell; else a variable the user sets (quoted, so a
    value with spaces still works, and ``${VAR:?...}`` so an unset one stops with a message)."""
    if given:
        return shlex.quote(given.rstrip("/") or "/")
    name = placeholder.lstrip("$")
    return f'"${{{name}:?set {name} first}}"'


def _props(adb: Adb, keys: list[str]) -> list[str]:
    """Several getprop values in one shell call (one line each, empty when unset)."""
    script = "; ".join(shell_join(["getprop", k]) for k in keys)
    lines = adb.shell_raw(script).output.splitlines()
    return [(lines[i].strip() if i < len(lines) else "") for i in range(len(keys))]
