"""What every request shares: the base model (unknown fields refused), the field types declared once and used by
every operation that takes them, the fields of a run on a QNN target, and the default output names."""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..mnn.soc import DEFAULT_SOC, default_soc_help
from ..shape_args import parse_shape_args
from ..targets import DEFAULT_TARGET, target_names
from .fields import Cli, PathRole, ServerSet
from .options import DEVICE_PATH_PATTERN, SERIAL_PATTERN, TargetOptions, parse_option_pairs

MAX_LOG_CHARS = 2_000_000


class Request(BaseModel):
    """Base of every request: unknown fields are refused (a misspelt option must not be ignored).

    Validators are built on first use (``defer_build``): a command line runs one operation, so loading
    every request model stays cheap."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    def default_out(self) -> tuple[str, str] | None:
        """Where this request's output goes when ``out`` is not given: ``(group, leaf)``, i.e. the CLI's
        ``qnn-debug-runs/<group>/<leaf>`` and the server's fresh folder under the same names. None: no output."""
        return None



# --- shared field types: declared once, used by every operation that takes them -------------------------

QNN_TARGETS = target_names()  # the registry's names when the faces load (the runner checks against it again)

Model = Annotated[str, PathRole("file"), Cli(positional=True), Field(
    min_length=1, max_length=4096, description="The model (.onnx; .mnn where the target runs one)")]
Out = Annotated[str | None, PathRole("dir", role="out"), Cli(flag="--out"), Field(
    default=None, max_length=4096,
    description="Output directory (new or empty); default: a fresh one under qnn-debug-runs/MODEL/")]
InputsOrTestDir = Annotated[str | None, PathRole("any"), Cli(flag="--inputs"), Field(
    default=None, max_length=4096,
    description="Inputs: an .npz keyed by input name (e.g. a baseline's inputs.npz, so every run sees the same "
    "data) or an MNN test dir (input.json + <input>.txt, e.g. the one a phone run used); default: seeded "
    "realistic random data")]
Shapes = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^=]+$")],
         Annotated[list[Annotated[int, Field(ge=1, le=1_000_000)]], Field(min_length=1, max_length=8)]] | None,
    Cli(flag="--shape", parse=parse_shape_args, metavar="NAME=1x3x224x224"),
    Field(default=None, max_length=64, description='Fix dynamic input shapes, e.g. {"x": [1, 3, 224, 224]} '
          "(on the command line NAME=1x3x224x224, repeatable); default: the model's own")]
Seed = Annotated[int, Cli(flag="--seed"), Field(
    ge=0, le=2**31 - 1, description="Seed of the generated inputs (ignored with inputs)")]
Soc = Annotated[int, Cli(flag="--soc"), Field(
    ge=1, le=1000, description=f"QNN soc_model ({default_soc_help()}, 57 = 8 Gen 3, 43 = 8 Gen 2); it decides "
    "the HTP's fp16 numerics")]
Arch = Annotated[int | None, Cli(flag="--arch"), Field(
    default=None, ge=60, le=99, description="HTP arch without the 'v' (e.g. 75); default: the SoC's own")]
Precision = Annotated[Literal["fp16", "fp32", "quantized"], Cli(flag="--precision"), Field(
    description="fp16, or quantized for QDQ models")]
Target = Annotated[str, Cli(flag="--target"), Field(
    min_length=1, max_length=32, json_schema_extra={"enum": list(QNN_TARGETS)},
    description="Where QNN runs: htp-sim (Qualcomm's HTP simulator on this machine, no phone needed), device "
    "(MNN's QNN backend on an Android phone over adb) or host (a local MNN build)")]
MnnGate = Annotated[bool, Cli(flag="--mnn-gate/--no-mnn-gate"), Field(
    description="Cross-check the reference with MNN CPU (the trust gate)")]
Serial = Annotated[str | None, Cli(flag="--serial", names=("-s",)), Field(
    default=None, max_length=128, pattern=SERIAL_PATTERN,
    description="adb serial of the phone (see devices); needed when several are attached; never read from the "
    "environment")]
Options = Annotated[TargetOptions | None, Cli(flag="--option", parse=parse_option_pairs, repeat=True, spread=True,
                                              metavar="KEY=VALUE"), Field(
    default=None, description="device/host settings (on the command line --option key=value, repeatable: mnn_dir, "
    "mnn2qnn, qnn_sdk, mnn_build_dir, qnn_lib_dir, mode, keep, loops, threads, serial, adb, and a target's own "
    "keys such as disabled_optimizers)")]
ExtraOptions = Annotated[dict[str, str], ServerSet(), Cli(hidden=True), Field(
    default_factory=dict, description="target-specific --option keys the typed options do not name")]
Adb = Annotated[str | None, ServerSet("adb"), Cli(flag="--adb", hidden=True), Field(
    default=None, max_length=4096, description="The adb executable to use")]
Timeout = Annotated[float, ServerSet("timeout"), Cli(flag="--timeout"), Field(
    gt=0, le=7 * 24 * 3600, description="Seconds before the target run is abandoned")]
Force = Annotated[bool, ServerSet(), Cli(flag="--force"), Field(description="Replace a previous run in --out")]
ReferenceModel = Annotated[str | None, PathRole("file"), Cli(flag="--reference-model"), Field(
    default=None, max_length=4096, description="The model the CPU reference runs (default: MODEL); give the "
    "original when MODEL is an edited copy")]


# Paths on the phone (never confined to the host roots; checked against a safe pattern instead).
DeviceFolder = Annotated[str | None, Field(default=None, max_length=512, pattern=DEVICE_PATH_PATTERN)]
DeviceFileName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$")]


MaxMemory = Annotated[str | None, Cli(flag="--max-memory"), Field(
    max_length=32, pattern=r"^\s*\d+(\.\d+)?\s*[kKmMgGtT]?(i?[bB])?\s*$",
    description="Peak memory per process on htp-sim, e.g. 6G: a model whose external weights do not fit one "
                "simulator session within it runs piece by piece (default: a third of the free memory, at most 8G)")]
Workers = Annotated[int | None, Cli(flag="--workers"), Field(
    default=None, ge=1, le=1024, description="htp-sim: simulator block runs at once on this machine (1: one after "
    "another; default: every core, through an embedded Ray cluster, when the blocks hold 256 MB of weights or more)")]
Cluster = Annotated[str | None, Cli(flag="--cluster"), Field(
    default=None, max_length=256, pattern=r"^(ray://)?[A-Za-z0-9_.:\[\]-]+:\d{1,5}$",
    description="htp-sim: send the block runs to the Ray cluster at this address (HOST:PORT of its head, as `ray "
    "start --head` printed); every node reads the model and --out at the same paths")]


class TargetRun(Request):
    """Fields every run on a QNN target shares (model, target, where the output goes, inputs, SoC)."""

    model: Model
    target: Target = DEFAULT_TARGET
    out: Out = None
    inputs: InputsOrTestDir = None
    shapes: Shapes = None
    seed: Seed = 0
    soc: Soc = DEFAULT_SOC
    arch: Arch = None
    serial: Serial = None
    options: Options = None
    extra_options: ExtraOptions
    adb: Adb = None
    timeout: Timeout = 1800.0
    force: Force = False



def out_stem(path: str) -> str:
    """A model's stem as the default output group (``qnn-debug-runs/<stem>/...``)."""
    return PurePath(path).stem or "model"


def out_leaf(path: str) -> str:
    """A folder's name as a default output name."""
    return PurePath(path).name or "run"
