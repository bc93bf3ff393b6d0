"""TEST DOUBLE setup: a fake phone served by the recording fake ``adb`` (see ``fake_adb.py``).

``FakePhone.install`` puts an ``adb`` wrapper first on PATH and lays out the phone's file system:
``getprop`` answering the SoC, ``/data/local/tmp/qnn-debug/bin`` with the fake ``ModuleBasic.out`` and
placeholder libraries (their bytes do not matter to the fakes; their presence is what the probe checks).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

DOUBLES = Path(__file__).resolve().parent
MNN_DIR = "/data/local/tmp/qnn-debug/bin"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def python_wrapper(path: Path, module: str) -> Path:
    """An executable that runs one of the doubles with this interpreter."""
    return _script(path, f'#!/bin/sh\nexec "{sys.executable}" "{DOUBLES / module}" "$@"\n')


@dataclass
class FakePhone:
    root: Path
    log: Path
    host_bin: Path

    @classmethod
    def install(cls, tmp: Path, monkeypatch: pytest.MonkeyPatch, *, devices: str = "FAKE0001:device",
                soc_part: str = "SM8650", libs: bool = True) -> FakePhone:
        root, log, host_bin = tmp / "phone", tmp / "adb-calls.jsonl", tmp / "host-bin"
        python_wrapper(host_bin / "adb", "fake_adb.py")
        monkeypatch.setenv("PATH", f"{host_bin}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
        monkeypatch.setenv("FAKE_ADB_LOG", str(log))
        monkeypatch.setenv("FAKE_ADB_DEVICES", devices)
        _script(root / "system" / "bin" / "getprop",
                "#!/bin/sh\ncase \"$1\" in\n"
                f"  ro.soc.model) echo {soc_part};;\n  ro.product.model) echo Fake_Phone;;\n"
                "  ro.board.platform) echo fakeplatform;;\n  ro.product.cpu.abi) echo arm64-v8a;;\n  *) echo;;\nesac\n")
        phone = cls(root, log, host_bin)
        if libs:
            phone.install_runtime(arch=75)
        return phone

    def device(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def install_runtime(self, arch: int, skip: tuple[str, ...] = ()) -> None:
        bin_dir = self.device(MNN_DIR)
        python_wrapper(bin_dir / "ModuleBasic.out", "fake_module_basic.py")
        for name in ("libMNN.so", "libc++_shared.so", "libQnnHtp.so", "libQnnSystem.so", "libQnnHtpPrepare.so",
                     f"libQnnHtpV{arch}Stub.so", f"libQnnHtpV{arch}Skel.so"):
            (bin_dir / name).write_bytes(b"\x7fELF placeholder for a test double")
        for name in skip:
            (bin_dir / name).unlink()

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.log.read_text(encoding="utf-8").splitlines()]
