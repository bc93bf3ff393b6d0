"""TEST DOUBLE for adb — a recording fake, not adb. Tests put a wrapper named ``adb`` on PATH that runs this.

It records every invocation (argv, one JSON line each, in ``$FAKE_ADB_LOG``) and serves a fake phone whose
file system lives under ``$FAKE_ADB_ROOT`` (device path ``/data/...`` ↔ ``$FAKE_ADB_ROOT/data/...``).
Devices and their states come from ``$FAKE_ADB_DEVICES`` (``serial:state,serial:state``; empty = none).
Messages and exit codes copy real adb 1.0.41 (see the project's adb notes): ``no devices/emulators
found``, ``device 'X' not found``, ``more than one device/emulator``, ``device unauthorized``,
``device offline``; ``push`` reports errors on stdout like the real one.

``shell`` hands its joined arguments to the host's real ``/bin/sh -c`` after mapping device paths into
the root, with ``$FAKE_ADB_ROOT/system/bin`` first on PATH (a fake ``getprop`` lives there). So quoting
mistakes in the caller would really execute — which is what the hostile-name tests check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ["FAKE_ADB_ROOT"])
LOG = Path(os.environ["FAKE_ADB_LOG"])
DEVICE_PREFIXES = ("/data/", "/sdcard/", "/vendor/", "/system/")


def record(argv: list[str]) -> None:
    with LOG.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"argv": argv}) + "\n")


def devices() -> list[tuple[str, str]]:
    spec = os.environ.get("FAKE_ADB_DEVICES", "")
    return [tuple(item.split(":", 1)) for item in spec.split(",") if item]  # type: ignore[misc]


def host_path(device_path: str) -> Path:
    if not device_path.startswith("/"):
        raise SystemExit(f"fake adb: relative device path {device_path!r}")
    return ROOT / device_path.lstrip("/")


def map_command(command: str) -> str:
    for prefix in DEVICE_PREFIXES:
        command = command.replace(prefix, f"{ROOT}{prefix}")
    return command


def fail(message: str, *, stdout: bool = False) -> int:
    print(message, file=sys.stdout if stdout else sys.stderr)
    return 1


def select(serial: str | None, push_style: bool) -> int | None:
    """None when the target device is usable, else the exit status after printing adb's message."""
    devs = devices()
    prefix = "adb: error: failed to get feature set: " if push_style else "error: "
    if serial is not None:
        match = [d for d in devs if d[0] == serial]
        if not match:
            return fail(f"{prefix}device '{serial}' not found", stdout=push_style)
        state = match[0][1]
    else:
        if not devs:
            return fail(f"{prefix}no devices/emulators found", stdout=push_style)
        if len(devs) > 1:
            return fail(f"{prefix}more than one device/emulator", stdout=push_style)
        state = devs[0][1]
    if state == "unauthorized":
        return fail(f"{prefix}device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set\n"
                    "Try 'adb kill-server' if that seems wrong.\nOtherwise check for a confirmation dialog on your device.",
                    stdout=push_style)
    if state == "offline":
        return fail(f"{prefix}device offline", stdout=push_style)
    return None


def copy(src: Path, dst: Path) -> None:
    """adb's rule: copying onto an existing directory puts the source inside it."""
    if dst.is_dir():
        dst = dst / src.name
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def main(argv: list[str]) -> int:
    record(argv)
    args = list(argv)
    serial = None
    while args and args[0] in ("-s", "-P", "-H", "-L"):
        if args[0] == "-s":
            serial = args[1]
        args = args[2:]
    if not args:
        return fail("adb: usage: no command")
    cmd, rest = args[0], args[1:]
    if cmd == "devices":
        print("List of devices attached")
        for s, state in devices():
            extra = " product:fake model:Fake_Phone device:fake transport_id:1" if "-l" in rest and state == "device" else ""
            print(f"{s}\t{state}{extra}")
        print()
        return 0
    if cmd in ("kill-server", "start-server"):
        return 0
    if cmd == "version":
        print("Android Debug Bridge version 1.0.41 (test double)")
        return 0
    if cmd == "wait-for-device":
        raise SystemExit("fake adb: wait-for-device would hang forever; callers must not use it")
    status = select(serial, push_style=cmd in ("push", "pull"))
    if status is not None:
        return status
    if cmd == "shell":
        command = " ".join(rest)
        env = {"PATH": f"{ROOT}/system/bin:/usr/bin:/bin", "FAKE_ADB_ROOT": str(ROOT), "HOME": str(ROOT)}
        for key in ("FAKE_MB_MODE", "PYTHONPATH"):
            if key in os.environ:
                env[key] = os.environ[key]
        proc = subprocess.run(["/bin/sh", "-c", map_command(command)], env=env, capture_output=True, text=True,
                              errors="replace", check=False, timeout=600)
        sys.stdout.write(proc.stdout.replace(str(ROOT), ""))
        sys.stderr.write(proc.stderr.replace(str(ROOT), ""))
        return proc.returncode
    if cmd == "push":
        *sources, remote = rest
        for src in sources:
            p = Path(src)
            if not p.exists():
                return fail(f"adb: error: cannot stat '{src}': No such file or directory")
            copy(p, host_path(remote))
            print(f"{src}: 1 file pushed, 0 skipped.")
        return 0
    if cmd == "pull":
        rest = [r for r in rest if r != "-a"]
        *remotes, local = rest
        for remote in remotes:
            src = host_path(remote)
            if not src.exists():
                return fail(f"adb: error: failed to stat remote object '{remote}': No such file or directory")
            copy(src, Path(local))
            print(f"{remote}: 1 file pulled, 0 skipped.")
        return 0
    return fail(f"adb: unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
