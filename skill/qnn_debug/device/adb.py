"""adb, driven safely: an explicit serial, quoted device commands, timeouts everywhere, clear errors.

Facts encoded here (Debian adb 1.0.41, measured without a device; device-side states from adb's own
messages):
- ``adb devices`` exits 0 with no device; its lines after the header are ``<serial>\\t<state>``;
- other commands exit 1 and print ``no devices/emulators found``, ``device '<s>' not found``,
  ``unauthorized``, ``offline`` or ``more than one device/emulator`` — on stderr, except ``push``,
  which reports on stdout, so both streams are classified together after dropping ``* daemon`` lines;
- ``adb wait-for-device`` blocks forever: every call here has a timeout;
- ``adb shell`` joins its arguments and hands them to the device's ``sh -c``: every word we send is
  single-quoted (``shlex.quote``), so a tensor, file or model name can never run a command;
- the serial is always passed as ``-s`` (never read from ``ANDROID_SERIAL``): hosts that launch us do not
  forward the environment, and two tools must never pick different phones.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from .. import process
from ..device_models import AdbDevice
from ..errors import BadInputError, DeviceError

DEFAULT_TIMEOUT = 60.0
DEVICE_BASE = "/data/local/tmp/qnn-debug"
_SAFE_SERIAL = re.compile(r"^[A-Za-z0-9._:\-\[\]@]+$")


class ShellResult(BaseModel):
    returncode: int
    output: str


def shell_join(argv: Sequence[str]) -> str:
    """One device-shell command line in which every argument is a single literal word."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def env_prefix(env: Mapping[str, str]) -> str:
    """``K='v' K2='v2' `` for a device command; keys must be plain identifiers."""
    for key in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BadInputError(f"invalid environment variable name {key!r}", hint="use letters, digits and _")
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())


def device_path(base: str, *parts: str) -> str:
    """Join device path parts under ``base``; a part that would climb out (``..``, absolute) is refused."""
    path = PurePosixPath(base)
    for part in parts:
        p = PurePosixPath(part)
        if p.is_absolute() or ".." in p.parts or "\x00" in part or "\n" in part:
            raise BadInputError(f"unsafe device path component {part!r}", hint="use a plain file name")
        path = path / p
    return str(path)


@dataclass(frozen=True)
class AdbResult:
    """What one adb command printed and how it exited."""

    returncode: int
    stdout: str
    stderr: str


class Adb:
    """One adb client bound to (at most) one serial."""

    def __init__(self, serial: str | None = None, *, adb: str = "adb", timeout: float = DEFAULT_TIMEOUT,
                 server_port: int | None = None):
        if serial is not None and not _SAFE_SERIAL.match(serial):
            raise BadInputError(f"invalid device serial {serial!r}", hint="copy the serial from `qnn-debug devices`")
        self.serial = serial
        self.adb = adb
        self.timeout = timeout
        self.server_port = server_port

    # -- plumbing -------------------------------------------------------------------------------------------

    def _base(self, with_serial: bool = True) -> list[str]:
        cmd = [self.adb]
        if self.server_port is not None:
            cmd += ["-P", str(self.server_port)]
        if with_serial and self.serial:
            cmd += ["-s", self.serial]
        return cmd

    def _run(self, args: list[str], *, timeout: float | None = None, with_serial: bool = True,
             check: bool = True) -> AdbResult:
        cmd = self._base(with_serial) + args
        limit = timeout or self.timeout
        env = {k: v for k, v in process.environ().items() if k != "ANDROID_SERIAL"}  # the serial is ours to choose
        try:
            done = process.run(cmd, timeout=limit, env=env)
        except FileNotFoundError:
            raise DeviceError(f"adb not found ({self.adb!r})",
                              hint="install Android platform-tools (Debian: apt-get install adb) or pass --adb PATH") from None
        except PermissionError:
            raise DeviceError(f"adb at {self.adb!r} is not executable", hint="pass a working adb with --adb PATH") from None
        except process.ChildTimeout:
            raise DeviceError(f"adb {args[0]} did not finish within {limit:.0f} s",
                              hint="check the USB connection and `adb devices`; raise --timeout for big transfers",
                              details={"command": args[:1]}) from None
        result = AdbResult(returncode=done.returncode, stdout=done.text, stderr=done.stderr)
        if check and result.returncode != 0:
            raise classify_failure(result.stdout + "\n" + result.stderr, self.serial, what=f"adb {args[0]}")
        return result

    # -- devices --------------------------------------------------------------------------------------------

    def devices(self) -> list[AdbDevice]:
        proc = self._run(["devices", "-l"], with_serial=False)
        return parse_devices(proc.stdout)

    def resolve_serial(self) -> str:
        """The serial to use: the given one if attached and ready, else the only ready device."""
        devices = self.devices()
        if self.serial:
            for d in devices:
                if d.serial == self.serial:
                    _check_state(d)
                    return d.serial
            attached = ", ".join(d.serial for d in devices) or "none"
            raise DeviceError(f"device {self.serial!r} is not attached", hint=f"attached: {attached}; check `adb devices`")
        if not devices:
            raise DeviceError("no device connected", hint="connect a phone with USB debugging on, then `adb devices`")
        ready = [d for d in devices if d.state == "device"]
        if len(ready) > 1 or (not ready and len(devices) > 1):
            raise DeviceError("more than one device connected",
                              hint=f"pass --serial with one of: {', '.join(d.serial for d in devices)}")
        if not ready:
            _check_state(devices[0])
        self.serial = ready[0].serial
        return self.serial

    # -- commands -------------------------------------------------------------------------------------------

    def shell(self, argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
              timeout: float | None = None, merge_stderr: bool = True) -> ShellResult:
        """Run one program on the device with every argument quoted; returns its exit status and output."""
        command = env_prefix(env or {}) + shell_join(argv)
        if merge_stderr:
            command += " 2>&1"
        if cwd is not None:
            command = f"cd {shlex.quote(cwd)} && {command}"
        return self.shell_raw(command, timeout=timeout)

    def shell_raw(self, command: str, *, timeout: float | None = None) -> ShellResult:
        """A command line built by this module (callers quote with :func:`shell_join`)."""
        proc = self._run(["shell", command], timeout=timeout, check=False)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0 and _adb_level_failure(out):
            raise classify_failure(out, self.serial, what="adb shell")
        return ShellResult(returncode=proc.returncode, output=out)

    def push(self, local: str | os.PathLike[str], remote: str, *, timeout: float | None = None) -> None:
        src = Path(local).absolute()  # an absolute path can never be taken for an option
        if not src.exists():
            raise BadInputError(f"{src} does not exist", hint="check the path")
        self._run(["push", str(src), remote], timeout=timeout)

    def pull(self, remote: str, local: str | os.PathLike[str], *, timeout: float | None = None) -> None:
        dst = Path(local).absolute()
        dst.parent.mkdir(parents=True, exist_ok=True)
        self._run(["pull", "-a", remote, str(dst)], timeout=timeout)

    def mkdir(self, path: str) -> None:
        res = self.shell(["mkdir", "-p", path])
        if res.returncode != 0:
            raise DeviceError(f"cannot create {path} on the device: {res.output.strip()}",
                              hint="check free space and that /data/local/tmp is writable")

    def exists(self, paths: Sequence[str]) -> dict[str, bool]:
        """Which device paths exist, in one shell call."""
        if not paths:
            return {}
        script = "; ".join(f"if [ -e {shlex.quote(p)} ]; then echo 1; else echo 0; fi" for p in paths)
        res = self.shell_raw(script)
        flags = [line.strip() for line in res.output.splitlines() if line.strip() in ("0", "1")]
        if len(flags) != len(paths):
            raise DeviceError("could not check files on the device", hint=res.output.strip()[-200:])
        return {p: f == "1" for p, f in zip(paths, flags, strict=True)}

    def remove_tree(self, path: str, *, base: str = DEVICE_BASE) -> None:
        """``rm -rf`` limited to our own directory tree on the device."""
        pure = PurePosixPath(path)
        if ".." in pure.parts or PurePosixPath(base) not in pure.parents:
            raise BadInputError(f"refusing to delete {path} on the device", hint=f"only paths under {base} are removed")
        self.shell(["rm", "-rf", "--", path])


def parse_devices(text: str) -> list[AdbDevice]:
    """Lines after ``List of devices attached``: ``<serial> <state> [key:value ...]``."""
    devices: list[AdbDevice] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line.startswith(("List of devices", "*", "adb server", "adb: ")):
            continue
        m = re.match(r"^(\S+)\s+(no permissions.*?|\S+)(?:\s+(.*))?$", line)
        if not m:
            continue
        details = dict(kv.split(":", 1) for kv in (m.group(3) or "").split() if ":" in kv)
        state = m.group(2).split(" (")[0] if m.group(2).startswith("no permissions") else m.group(2)
        devices.append(AdbDevice(serial=m.group(1), state=state, details=details))
    return devices


def _check_state(device: AdbDevice) -> None:
    if device.state == "device":
        return
    if device.state == "unauthorized":
        raise DeviceError(f"device {device.serial} is unauthorized",
                          hint="unlock the phone and accept the 'Allow USB debugging' (RSA key) prompt")
    if device.state == "offline":
        raise DeviceError(f"device {device.serial} is offline", hint="reconnect the cable or run `adb reconnect`")
    if device.state.startswith("no permissions"):
        raise DeviceError(f"no permission to access device {device.serial}",
                          hint="add a udev rule for the phone or run adb as a user in the plugdev group")
    raise DeviceError(f"device {device.serial} is in state {device.state!r}", hint="boot the phone normally")


_ADB_ERRORS = ("no devices/emulators found", "not found", "unauthorized", "offline", "more than one device",
               "failed to get feature set", "cannot connect to daemon", "protocol fault", "no permissions")


def _adb_level_failure(output: str) -> bool:
    text = _strip_daemon(output)
    return any(f"error: {e}" in text or f"adb: error: {e}" in text for e in _ADB_ERRORS) or text.startswith("error: device")


def _strip_daemon(output: str) -> str:
    return "\n".join(line for line in output.splitlines() if not line.startswith("* daemon")).strip()


def classify_failure(output: str, serial: str | None, *, what: str = "adb") -> DeviceError:
    """Map adb's messages (stdout and stderr together) to one clear DeviceError."""
    text = _strip_daemon(output)
    low = text.lower()
    if "no devices/emulators found" in low:
        return DeviceError("no device connected", hint="connect a phone with USB debugging on, then `adb devices`",
                           details={"adb": text[-300:]})
    if m := re.search(r"device '([^']*)' not found", text):
        return DeviceError(f"device {m.group(1)!r} is not attached", hint="check the serial with `qnn-debug devices`",
                           details={"adb": text[-300:]})
    if "unauthorized" in low:
        return DeviceError(f"device {serial or ''} is unauthorized".replace("  ", " "),
                           hint="unlock the phone and accept the 'Allow USB debugging' (RSA key) prompt",
                           details={"adb": text[-300:]})
    if "more than one device" in low:
        return DeviceError("more than one device connected", hint="pass --serial (see `qnn-debug devices`)",
                           details={"adb": text[-300:]})
    if "offline" in low:
        return DeviceError(f"device {serial or ''} is offline".replace("  ", " "),
                           hint="reconnect the cable or run `adb reconnect`", details={"adb": text[-300:]})
    if "no permissions" in low:
        return DeviceError("no permission to access the device", hint="add a udev rule or join the plugdev group",
                           details={"adb": text[-300:]})
    last = text.splitlines()[-1] if text else "no output"
    return DeviceError(f"{what} failed: {last}", hint="see `adb devices`; the full message is in details",
                       details={"adb": text[-1000:]})
