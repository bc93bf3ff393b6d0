"""adb layer: errors, quoting, transfers and probe, against the recording fake adb; real Debian adb without a phone."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from doubles.fake_phone import MNN_DIR, FakePhone
from qnn_debug.device.adb import Adb, device_path, parse_devices, shell_join
from qnn_debug.device.probe import probe_device
from qnn_debug.errors import BadInputError, DeviceError

HOSTILE = ["a;touch pwned1", "$(touch pwned2)", "`touch pwned3`", "q'uote\"d", "with space", "new\nline", "*", "-rf"]


def test_parse_devices() -> None:
    text = ("* daemon not running; starting now at tcp:5037\nList of devices attached\n"
            "R58M1\tdevice product:a model:SM_S918B device:dm3q transport_id:3\nEMU\tunauthorized\n"
            "X1\toffline\nY2\tno permissions (user in plugdev group); see [http://developer.android.com/tools/device.html]\n\n")
    devs = parse_devices(text)
    assert [(d.serial, d.state) for d in devs] == [("R58M1", "device"), ("EMU", "unauthorized"), ("X1", "offline"),
                                                   ("Y2", "no permissions")]
    assert devs[0].details["model"] == "SM_S918B"


@pytest.mark.parametrize("devices,serial,message", [
    ("", None, "no device connected"),
    ("A1:device,B2:device", None, "more than one device"),
    ("A1:unauthorized", None, "unauthorized"),
    ("A1:offline", None, "offline"),
    ("A1:device", "ZZ9", "'ZZ9' is not attached"),
    ("A1:device,B2:unauthorized", "B2", "unauthorized"),
])
def test_device_selection_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, devices: str, serial: str | None,
                                 message: str) -> None:
    FakePhone.install(tmp_path, monkeypatch, devices=devices, libs=False)
    with pytest.raises(DeviceError) as e:
        Adb(serial).resolve_serial()
    assert message in e.value.message and e.value.hint


@pytest.mark.parametrize("devices,serial,message", [
    ("", None, "no device connected"), ("A1:device", "ZZ9", "not attached"), ("A1:offline", "A1", "offline"),
    ("A1:unauthorized", "A1", "unauthorized"), ("A1:device,B2:device", None, "more than one"),
])
def test_command_errors_from_both_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, devices: str, serial: str | None,
                                          message: str) -> None:
    FakePhone.install(tmp_path, monkeypatch, devices=devices, libs=False)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(DeviceError, match=message):
        Adb(serial).shell(["true"])
    with pytest.raises(DeviceError, match=message):  # push reports on stdout
        Adb(serial).push(tmp_path / "f.txt", "/data/local/tmp/f.txt")


def test_the_first_device_is_picked_only_when_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch, devices="ONLY1:device,OTHER:unauthorized", libs=False)
    adb = Adb()
    assert adb.resolve_serial() == "ONLY1"
    adb.shell(["true"])
    assert phone.calls()[-1][:2] == ["-s", "ONLY1"]


def test_adb_missing_and_timeouts(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="adb not found") as e:
        Adb(adb=str(tmp_path / "no-adb")).devices()
    assert "apt-get install adb" in (e.value.hint or "")
    slow = tmp_path / "slow-adb"
    slow.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    slow.chmod(0o755)
    with pytest.raises(DeviceError, match="did not finish within 1 s"):
        Adb(adb=str(slow), timeout=1).devices()


def test_serial_is_validated_and_never_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BadInputError):
        Adb("A1; reboot")
    phone = FakePhone.install(tmp_path, monkeypatch, devices="A1:device,B2:device", libs=False)
    monkeypatch.setenv("ANDROID_SERIAL", "A1")
    with pytest.raises(DeviceError, match="more than one"):
        Adb().resolve_serial()
    assert all("-s" not in c or c[c.index("-s") + 1] != "A1" for c in phone.calls())


def test_shell_words_stay_literal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch, libs=False)
    phone.device("/data/local/tmp").mkdir(parents=True)
    adb = Adb("FAKE0001")
    res = adb.shell(["printf", "%s\\0", *HOSTILE], cwd="/data/local/tmp", env={"X": "$(touch pwned4)"})
    assert res.output.split("\0")[:-1] == HOSTILE
    res2 = adb.shell(["sh", "-c", 'printf %s "$X"'], env={"X": "$(touch pwned5); `id`"})
    assert res2.output == "$(touch pwned5); `id`"
    assert not list(tmp_path.rglob("pwned*"))
    with pytest.raises(BadInputError):
        adb.shell(["true"], env={"A;B": "1"})
    assert shell_join(["a b", "c'd"]) == "'a b' 'c'\"'\"'d'"


def test_push_pull_hostile_file_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch, libs=False)
    adb = Adb("FAKE0001")
    src = tmp_path / "src"
    src.mkdir()
    names = [n for n in HOSTILE if "\n" not in n and n != "-rf"] + ["-rf"]
    for i, n in enumerate(names):
        (src / f"{n}.txt").write_text(str(i))
    adb.mkdir("/data/local/tmp/qnn-debug/runs/t1")
    adb.push(src, "/data/local/tmp/qnn-debug/runs/t1/in")
    assert adb.exists(["/data/local/tmp/qnn-debug/runs/t1/in/$(touch pwned2).txt"]) == {
        "/data/local/tmp/qnn-debug/runs/t1/in/$(touch pwned2).txt": True}
    adb.pull("/data/local/tmp/qnn-debug/runs/t1/in", tmp_path / "back")
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == sorted(f"{n}.txt" for n in names)
    adb.remove_tree("/data/local/tmp/qnn-debug/runs/t1")
    assert not phone.device("/data/local/tmp/qnn-debug/runs/t1").exists()
    assert not list(tmp_path.rglob("pwned*"))


def test_device_paths_cannot_escape() -> None:
    assert device_path("/data/local/tmp/qnn-debug/runs/ab", "model", "x.mnn") == "/data/local/tmp/qnn-debug/runs/ab/model/x.mnn"
    for bad in ("../x", "/etc", "a/../../b", "new\nline"):
        with pytest.raises(BadInputError):
            device_path("/data/local/tmp/qnn-debug/runs/ab", bad)
    with pytest.raises(BadInputError):
        Adb("A1").remove_tree("/data/local/tmp")
    with pytest.raises(BadInputError):
        Adb("A1").remove_tree("/data/local/tmp/qnn-debug/../../../system")


def test_probe_reports_missing_files_with_push_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch, soc_part="SM8750", libs=False)
    phone.install_runtime(arch=79, skip=("libQnnHtpV79Skel.so", "libc++_shared.so"))
    result = probe_device(Adb(), mnn_dir=MNN_DIR, qnn_sdk="/opt/qnn sdk")
    assert (result.serial, result.soc_id, result.htp_arch, result.soc_name) == ("FAKE0001", 69, 79, "Snapdragon 8 Elite")
    assert sorted(f.name for f in result.missing) == ["libQnnHtpV79Skel.so", "libc++_shared.so"]
    assert not result.ready
    skel = next(f for f in result.missing if "Skel" in f.name)
    assert skel.push == f"adb -s FAKE0001 push '/opt/qnn sdk'/lib/hexagon-v79/unsigned/libQnnHtpV79Skel.so {MNN_DIR}/"
    libcxx = next(f for f in result.missing if f.name == "libc++_shared.so")
    assert (libcxx.push or "").startswith('adb -s FAKE0001 push "${ANDROID_NDK:?set ANDROID_NDK first}"/')


def test_probe_cli_unknown_soc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakePhone.install(tmp_path, monkeypatch, soc_part="SM9999")
    proc = subprocess.run([str(Path(sys.executable).parent / "qnn-debug"), "probe", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["soc_id"] is None and not out["ready"] and "pass --soc and --arch" in out["notes"][0]


# --- real Debian adb, no phone attached -------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("adb") is None, reason="Debian adb is not installed (make setup installs it as root)")
def test_real_adb_without_a_device_says_no_device(tmp_path: Path) -> None:
    """Uses its own adb server port so a user's daemon is never touched, and stops the daemon it started."""
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(_free_port()), "HOME": str(tmp_path)}
    env.pop("ANDROID_SERIAL", None)
    cli = str(Path(sys.executable).parent / "qnn-debug")
    try:
        devs = subprocess.run([cli, "devices", "--json"], capture_output=True, text=True, env=env, timeout=120)
        assert devs.returncode == 0, devs.stderr
        assert json.loads(devs.stdout) == {"devices": [], "ready": []}
        probe = subprocess.run([cli, "probe", "--json"], capture_output=True, text=True, env=env, timeout=120)
        assert probe.returncode == 3
        err = json.loads(probe.stdout)
        assert err["error"] == "device_failure" and err["message"] == "no device connected"
        assert "Traceback" not in probe.stderr
        serial = subprocess.run([cli, "probe", "--serial", "NOPE123", "--json"], capture_output=True, text=True, env=env,
                                timeout=120)
        assert serial.returncode == 3 and "'NOPE123' is not attached" in json.loads(serial.stdout)["message"]
    finally:
        subprocess.run(["adb", "kill-server"], env=env, capture_output=True, timeout=30, check=False)
