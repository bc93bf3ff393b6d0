"""Requests that drive MNN itself: a run on a phone or a host build, test dirs, a device dump to import, and the
phones attached."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..errors import BadInputError
from .fields import Cli, PathRole, ServerSet
from .request_base import (
    Adb,
    DeviceFolder,
    ExtraOptions,
    Force,
    InputsOrTestDir,
    Options,
    Out,
    Request,
    Seed,
    Serial,
    Shapes,
    Timeout,
    out_stem,
)


def bool_word(value: str | bool | None, what: str) -> bool | None:
    """``true/1/yes`` or ``false/0/no`` as typed on a command line (None stays None)."""
    if value is None or isinstance(value, bool):
        return value
    word = value.strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise BadInputError(f"{what} must be true or false, not {value!r}", hint=f"write {what} true or {what} false")


def _shape_mutable_word(value: str | None) -> bool | None:
    if value is None or value.strip().lower() == "absent":
        return None
    return bool_word(value, "--shape-mutable")


def _value_word(value: str | None) -> bool | None:
    return bool_word(value, "--value")


class RunRequest(Request):
    """An .mnn model to run with MNN's own ModuleBasic on a phone or a local MNN build, judged against a reference."""

    model: Annotated[str, PathRole("file"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The .mnn model (or an MNN2QNNModel wrapper)")]
    target: Annotated[Literal["device", "host"], Cli(flag="--target"), Field(
        description="device (phone over adb) or host (local MNN build, options.mnn_build_dir)")] = "device"
    forward: Annotated[str, Cli(flag="--forward"), Field(
        min_length=1, max_length=16, pattern=r"^(qnn|cpu|opencl|[0-9]{1,2})$",
        description="MNN forward type: qnn (type 5), cpu (0) or opencl (3)")] = "qnn"
    precision: Annotated[str, Cli(flag="--precision"), Field(
        min_length=1, max_length=16, pattern=r"^(low|high|normal|low_bf16|[0-9])$",
        description="low (fp16), high (fp32 tensors on CPU/OpenCL; HTP still computes in fp16) or normal")] = "low"
    testdir: Annotated[str | None, PathRole("dir"), Cli(flag="--testdir"), Field(
        default=None, max_length=4096,
        description="Run this MNN test dir (input.json + <tensor>.txt inputs and references)")] = None
    baseline: Annotated[str | None, PathRole("dir"), Cli(flag="--baseline"), Field(
        default=None, max_length=4096, description="Use this baseline's inputs and fp32 reference outputs")] = None
    out: Out = Field(None, description="Run directory (default: qnn-debug-runs/MODEL/TARGET-run)")
    serial: Serial = None
    inputs: InputsOrTestDir = None
    shapes: Shapes = None
    seed: Seed = 0
    options: Options = None
    extra_options: ExtraOptions
    adb: Adb = None
    timeout: Timeout = 1800.0
    force: Force = False

    def default_out(self) -> tuple[str, str] | None:
        return out_stem(self.model), f"{self.target}-run"


class TestDirRequest(Request):
    """An MNN test dir (input.json + <tensor>.txt) to write for ModuleBasic, as testMNNFromOnnx.py does."""

    __test__ = False  # not a pytest test class

    out: Annotated[str, PathRole("dir", role="out"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="Test directory to write")]
    baseline: Annotated[str | None, PathRole("dir"), Cli(flag="--baseline"), Field(
        default=None, max_length=4096, description="Baseline dir: its exact inputs and fp32 reference outputs")] = None
    model: Annotated[str | None, PathRole("file"), Cli(flag="--model"), Field(
        default=None, max_length=4096,
        description="Without a baseline: the .mnn whose inputs to write (no references)")] = None
    inputs: InputsOrTestDir = None
    shapes: Shapes = None
    seed: Seed = 0
    shape_mutable: Annotated[bool | None, Cli(flag="--shape-mutable", parse=_shape_mutable_word, default="false"), Field(
        description="shapeMutable to write: false (needed by QNN online), true, or null/absent to leave the key "
        "out (ModuleBasic's default, true)")] = False
    force: Force = False


class ToggleShapeMutableRequest(Request):
    """A ModuleBasic test dir whose input.json ``shapeMutable`` to set (or flip)."""

    test_dir: Annotated[str, PathRole("dir"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="MNN test dir holding input.json")]
    value: Annotated[bool | None, Cli(flag="--value", parse=_value_word), Field(
        default=None, description="false for QNN online runs; true is ModuleBasic's default; omit to flip the "
        "current value")] = None


class ImportDumpRequest(Request):
    """An MNN QNN dump directory to import as a run that compare reads like any other."""

    dump_dir: Annotated[str, PathRole("dir"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="MNN's qnn_intermediate_outputs dir (manifest_*.tsv + .raw)")]
    model: Annotated[str | None, PathRole("file"), Cli(flag="--model"), Field(
        default=None, max_length=4096, description="The source .mnn (names t<N>, ops and layouts)")] = None
    out: Annotated[str, PathRole("dir", role="out"), Cli(flag="--out"), Field(
        min_length=1, max_length=4096, description="Run directory to write")]
    execution: Annotated[int | None, Cli(flag="--execution"), Field(
        default=None, ge=0, description="Which execution to import (default: the newest)")] = None
    reference: Annotated[str | None, PathRole("any"), Cli(flag="--reference"), Field(
        default=None, max_length=4096, description="Run or baseline dir whose tensor shapes settle layouts")] = None
    force: Force = False


DeviceAdb = Annotated[str, ServerSet("adb"), Cli(flag="--adb"), Field(
    min_length=1, max_length=4096, description="The adb executable to use")]
DeviceTimeout = Annotated[float, ServerSet("device_timeout"), Cli(hidden=True), Field(
    gt=0, le=3600, description="Seconds each adb call may take")]


class DevicesRequest(Request):
    """Which adb to ask for the phones it sees."""

    adb: DeviceAdb = "adb"
    timeout: DeviceTimeout = 30.0


class ProbeDeviceRequest(Request):
    """A phone to ask for its SoC and HTP arch, and the runtime folder to check for MNN's QNN files."""

    serial: Serial = None
    adb: DeviceAdb = "adb"
    mnn_dir: Annotated[DeviceFolder, Cli(flag="--mnn-dir"), Field(
        description="Device dir with ModuleBasic.out, libMNN*.so and the QNN libs (default: /data/local/tmp/mnn)")] = None
    mode: Annotated[Literal["offline", "online"], Cli(flag="--mode"), Field(
        description="offline (MNN2QNNModel models) or online (graphs built on the phone): which libraries are "
        "needed")] = "offline"
    qnn_sdk: Annotated[str | None, Cli(flag="--qnn-sdk"), Field(
        default=None, max_length=1024, description="Host path of the QNN/QAIRT SDK root, to fill in the adb push "
        "commands for missing QNN libraries")] = None
    mnn_build: Annotated[str | None, Cli(flag="--mnn-build"), Field(
        default=None, max_length=1024, description="Host path of your Android MNN build dir (ModuleBasic.out, "
        "libMNN.so), to fill in the adb push commands")] = None
    ndk: Annotated[str | None, Cli(flag="--ndk"), Field(
        default=None, max_length=1024, description="Host path of the Android NDK, to fill in the adb push for "
        "libc++_shared.so")] = None
    timeout: DeviceTimeout = 60.0

