"""Request models of the public operations: field names, types, limits and help, declared once.

The MCP tool of an operation takes exactly these fields as its arguments (plus server-only ones such
as ``background``); the CLI command reads them from its flags (:class:`~.fields.Cli`). Paths are
plain strings marked with :class:`~.fields.PathRole`, so the server can confine them before use.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadInputError
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


class TriageRequest(Request):
    """A log to classify: a file (``log_path``) or the text itself (``log_text``), and past solved cases."""

    log_text: Annotated[str | None, Cli(hidden=True), Field(
        default=None, max_length=MAX_LOG_CHARS, description="The log itself (stdout+stderr of the failing run)")] = None
    log_path: Annotated[str | None, PathRole("file"), Cli(positional=True, default="-"), Field(
        default=None, max_length=4096,
        description="A log file (MNN stdout, QNN/ORT log, logcat, gdb backtrace; any size; '-' reads stdin); give "
        "this or log_text")] = None
    cases_path: Annotated[str | None, PathRole("file"), Cli(flag="--cases"), Field(
        default=None, max_length=4096,
        description="Cases file of past solved problems (JSON lines written by `qnn-debug case-add`); default: "
        "qnn-debug-cases.jsonl in the working folder when it exists")] = None


ProbeShape = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[0-9x]+(:[a-z0-9]+)?(=[-0-9.,eE+]*)?$")]


def parse_attr_pairs(pairs: list[str] | None) -> dict[str, str]:
    """``--attr key=value`` (repeatable) as the dict the probe takes; values keep their text (``1,1``)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise BadInputError(f"bad --attr {pair!r}", hint="use key=value, e.g. --attr axis=1 or --attr pads=1,1,1,1")
        out[key.strip()] = value.strip()
    return out


class OpLookupRequest(Request):
    """An op to look up (MNN OpType name or number, ONNX op or QNN op) and, optionally, a simulator probe."""

    op: Annotated[str, Cli(positional=True), Field(
        min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]*$",
        description="MNN OpType name or number (e.g. Convolution or 17), ONNX op (Conv) or QNN op (Conv2d)")]
    probe: Annotated[bool, Cli(flag="--probe"), Field(
        description="also build a one-op ONNX graph and try it on the HTP simulator (takes seconds)")] = False
    shapes: Annotated[list[ProbeShape] | None, Cli(flag="--shape", metavar="DIMS[:DTYPE][=V1,...]"), Field(
        default=None, max_length=8, description="probe inputs, one per input: DIMS[:DTYPE][=V1,...], e.g. "
        "1x64x56x56:float32; later inputs become constants")] = None
    attrs: Annotated[dict[Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                          Annotated[str, Field(max_length=200)]] | None,
                     Cli(flag="--attr", parse=parse_attr_pairs, metavar="KEY=VALUE"), Field(
        default=None, max_length=32, description='probe ONNX attributes, e.g. {"kernel_shape": "3,3"} (on the '
        "command line --attr kernel_shape=3,3, repeatable)")] = None
    soc: Annotated[int, Cli(flag="--soc"), Field(
        ge=1, le=1000, description=f"soc_model of the probe ({default_soc_help()}; 30 = fp32-accurate check)")] = DEFAULT_SOC
    sdk: Annotated[str | None, PathRole("dir", role="exec"), Cli(flag="--sdk"), Field(
        default=None, max_length=4096, description="QNN/QAIRT SDK root with headers and HTML docs (default: "
        "$QNN_SDK_ROOT)")] = None
    opset: Annotated[int, Cli(flag="--opset"), Field(ge=7, le=30, description="ONNX opset of the probe graph")] = 20


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


class BaselineRequest(Request):
    """The model to build the trusted CPU baseline of: fp32 reference, fp16 floor and the MNN CPU gate."""

    model: Annotated[str, PathRole("file"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The .onnx (or .mnn) model")]
    out: Out = Field(None, description="Baseline directory (default: qnn-debug-runs/MODEL/baseline)")
    inputs: InputsOrTestDir = None
    shapes: Shapes = None
    seed: Seed = 0
    mnn_gate: MnnGate = True
    mnn_model: Annotated[str | None, PathRole("file"), Cli(flag="--mnn-model"), Field(
        default=None, max_length=4096, description="Your own .mnn of this ONNX model: it is gated against the "
        "reference too, and the report says whether it differs from the .mnn converted here")] = None
    force: Force = False

    def default_out(self) -> tuple[str, str] | None:
        return _stem(self.model), "baseline"


class DumpRequest(TargetRun):
    """A model to run on a QNN target, capturing every intermediate tensor and refusing any CPU fallback."""

    precision: Precision = "fp16"
    out: Out = Field(None, description="Run directory (default: qnn-debug-runs/MODEL/TARGET-PRECISION)")

    def default_out(self) -> tuple[str, str] | None:
        return _stem(self.model), f"{self.target}-{self.precision}"


class DiagnoseRequest(TargetRun):
    """Baseline, all-tensor dump and comparison of one .onnx model in one call."""

    precision: Precision = "fp16"
    out: Out = Field(None, description="Output directory (default: qnn-debug-runs/MODEL/diagnose-TARGET)")
    mnn_gate: MnnGate = True
    mnn_model: Annotated[str | None, PathRole("file"), Cli(flag="--mnn-model"), Field(
        default=None, max_length=4096, description="device/host: your own .mnn of this ONNX model runs on the target "
        "instead of one converted here; the baseline gates it against ONNX Runtime")] = None
    reference_model: ReferenceModel = None
    max_memory: MaxMemory = None

    def default_out(self) -> tuple[str, str] | None:
        return _stem(self.model), f"diagnose-{self.target}"


class CompareRequest(Request):
    """A target run to compare with a baseline (or a reference run), tensor by tensor."""

    reference: Annotated[str, PathRole("any"), Cli(positional=True), Field(
        min_length=1, max_length=4096,
        description="Baseline directory (reference/ + fp16_floor/) or a reference run")]
    target: Annotated[str, PathRole("any"), Cli(positional=True), Field(
        min_length=1, max_length=4096,
        description="A run directory, an MNN QNN dump directory (manifest_*.tsv + .raw) or an .npz. A baseline "
        "directory is refused: pass its reference/ run to compare two baselines")]
    model: Annotated[str | None, PathRole("file"), Cli(flag="--model"), Field(
        default=None, max_length=4096, description="The reference's ONNX model, used to re-run suspect ops on "
        "CPU (default: the one recorded in the baseline)")] = None
    mnn_model: Annotated[str | None, PathRole("file"), Cli(flag="--mnn-model"), Field(
        default=None, max_length=4096, description="Source .mnn of an MNN QNN dump: it names t<N> tensors and "
        "restores layouts (default: the baseline's)")] = None
    execution: Annotated[int | None, Cli(flag="--execution"), Field(
        default=None, ge=0, description="Which execution of an MNN dump (default: the newest)")] = None
    report_dir: Annotated[str | None, PathRole("dir", role="out"), Cli(flag="--report"), Field(
        default=None, max_length=4096, description="Write compare.md, compare.json and error_by_position.png "
        "here (default: none from the CLI; a fresh one under qnn-debug-runs/compare/ from the MCP server)")] = None
    local_checks: Annotated[bool, Cli(flag="--local/--no-local"), Field(
        description="Re-run suspect ops on CPU with the target's own inputs (slower; tells a wrong op from "
        "inherited error)")] = True
    fp16_codes: Annotated[Literal["htp", "ieee"], Cli(flag="--fp16-codes"), Field(
        description="How an MNN dump's fp16 buffers read exponent-31 codes: htp (finite up to 131008; HTP has "
        "no inf/NaN) or ieee (an IEEE-fp16 producer)")] = "htp"
    json_path: Annotated[str | None, PathRole("file", role="out"), ServerSet(), Cli(hidden=True), Field(
        default=None, max_length=4096, description="Also write the JSON result to this file")] = None

    def default_out(self) -> tuple[str, str] | None:
        return "compare", _leaf(self.target)


class BisectRequest(TargetRun):
    """A model to bisect when no all-tensor dump is possible or trustworthy."""

    model: Annotated[str, PathRole("file"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The .onnx model (device/host: each cut is converted to .mnn)")]
    target: Annotated[str, Cli(flag="--target"), Field(
        min_length=1, max_length=32, json_schema_extra={"enum": list(QNN_TARGETS)},
        description="htp-sim (no phone needed), device (ModuleBasic over adb: QNN fp16 vs MNN CPU fp32, CPU fp16 "
        "as the floor) or host")] = DEFAULT_TARGET
    out: Out = Field(None, description="Output directory (default: qnn-debug-runs/MODEL/bisect-TARGET)")
    reference_model: ReferenceModel = None
    baseline: Annotated[str | None, PathRole("dir"), Cli(flag="--baseline"), Field(
        default=None, max_length=4096, description="Reuse this baseline directory (htp-sim) instead of building "
        "one")] = None
    opencl: Annotated[bool, Cli(flag="--opencl"), Field(
        description="device/host: also run OpenCL fp16 as a third opinion")] = False
    mnn_gate: MnnGate = True
    max_memory: MaxMemory = None

    def default_out(self) -> tuple[str, str] | None:
        return _stem(self.model), f"bisect-{self.target}"


class LocaliseBlocksRequest(TargetRun):
    """An LLM decoder or a VL vision encoder whose blocks (and the ops between them) to run one by one on the
    reference values."""

    model: Annotated[str, PathRole("any"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The .onnx to localise (node names carry /layers.N/ or "
        "/blocks.N/): llmexport's onnx/llm.onnx at the fixed prefill shape, a VL export's visual.onnx, or a VL "
        "export folder (its onnx/visual.onnx or onnx/llm.onnx, chosen by --graph)")]
    graph: Annotated[Literal["visual", "llm"] | None, Cli(flag="--graph"), Field(
        default=None, description="With a VL export folder: localise the vision encoder (visual, the default) or the "
        "M-RoPE decoder (llm)")] = None
    reference_model: Annotated[str | None, PathRole("any"), Cli(flag="--reference-model"), Field(
        default=None, max_length=4096, description="The model the CPU reference runs (default: MODEL); give the "
        "original when MODEL is an edited copy (a VL export folder too: its graph of the same --graph)")] = None
    image: Annotated[str | None, PathRole("file"), Cli(flag="--image"), Field(
        default=None, max_length=4096, description="VL vision encoder: make the patches from this image (resized to "
        "the graph's grid, as two images so the attention mask matters); default: smooth synthetic patches")] = None
    target: Annotated[str, Cli(flag="--target"), Field(
        min_length=1, max_length=32, json_schema_extra={"enum": list(QNN_TARGETS)},
        description="htp-sim (every block in one simulator session, no phone needed), device (each block's .mnn "
        "dumped with MNN2QNNModel --dump_intermediate_outputs and run on the phone over adb; options mnn2qnn and "
        "qnn_sdk) or host (a local MNN build)")] = DEFAULT_TARGET
    out: Out = Field(None, description="Output directory (default: qnn-debug-runs/MODEL/blocks, or blocks-TARGET off the simulator)")
    layers_per_block: Annotated[int, Cli(flag="--layers-per-block"), Field(
        ge=1, le=64, description="Decoder layers cut out together")] = 1
    inner: Annotated[Literal["diagnose", "bisect", "none"], Cli(flag="--inner"), Field(
        description="Inside the first failing block: diagnose (dump + compare), bisect, or none")] = "diagnose"
    max_memory: MaxMemory = Field(None, description="Memory on htp-sim, e.g. 6G: blocks share a simulator session "
                                  "only within it, and the block runs at once on one machine stay within it together "
                                  "(default: a third of the free memory, at most 8G)")
    workers: Workers = None
    cluster: Cluster = None

    def default_out(self) -> tuple[str, str] | None:
        leaf = "blocks" if self.target == DEFAULT_TARGET else f"blocks-{self.target}"
        return _stem(self.model), f"{leaf}-{self.graph}" if self.graph else leaf


class LlmCheckRequest(Request):
    """An llmexport folder (and optionally generate_llm_qnn.py's outputs) to check for the QNN LLM path."""

    export_dir: Annotated[str, PathRole("dir"), Cli(positional=True), Field(
        min_length=1, max_length=4096,
        description="The folder llmexport.py --export mnn wrote (llm.mnn, llm_config.json, ...)")]
    qnn_dir: Annotated[str | None, PathRole("dir"), Cli(flag="--qnn-dir"), Field(
        default=None, max_length=4096,
        description="generate_llm_qnn.py's --cache_path dir or the model's qnn/ folder")] = None
    max_history_token: Annotated[int | None, Cli(flag="--max-history-token"), Field(
        default=None, ge=0, le=1_000_000, description="The --max_history_token given to generate_llm_qnn.py "
        "(default: from qnn.json, else 0)")] = None
    image_sizes: Annotated[str | None, Cli(flag="--image-sizes"), Field(
        default=None, max_length=512, pattern=r"^\s*\d+\s*x\s*\d+\s*(,\s*\d+\s*x\s*\d+\s*)*$",
        description="VL exports: the --image_sizes given to generate_llm_qnn.py for visual.mnn, WxH[,WxH...] "
        "(checked against the runtime's resize rule; default: only the size-independent checks)")] = None


DeviceFolder = Annotated[str | None, Field(default=None, max_length=512, pattern=DEVICE_PATH_PATTERN)]
DeviceFileName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$")]


class LlmTextRequest(Request):
    """The CPU reference (an export folder) and at most one target: a phone, another export, or a text."""

    export_dir: Annotated[str, PathRole("dir"), Cli(positional=True), Field(
        min_length=1, max_length=4096,
        description="The llmexport folder (config.json, llm.mnn, llm.mnn.weight) for the CPU reference")]
    prompt: Annotated[str | None, Cli(flag="--prompt"), Field(
        default=None, min_length=1, max_length=4000, description="Fixed prompt, one line for llm_demo "
        "(default: Hello)")] = None
    prompt_file: Annotated[str | None, PathRole("file"), Cli(flag="--prompt-file"), Field(
        default=None, max_length=4096, description="Read the prompt from this UTF-8 file")] = None
    max_new_tokens: Annotated[int, Cli(flag="--max-new-tokens"), Field(
        ge=1, le=512, description="Tokens to generate (and compare)")] = 32
    out: Out = Field(None, description="New directory for logits, logs and llm_text.json (default: qnn-debug-runs/EXPORT/llm-text)")
    target_export: Annotated[str | None, PathRole("dir"), Cli(flag="--target-export"), Field(
        default=None, max_length=4096, description="Another export folder, run on MNN CPU the same way")] = None
    target_text: Annotated[str | None, Cli(flag="--target-text"), Field(
        default=None, max_length=100_000, description="Text a phone printed, given inline")] = None
    target_text_file: Annotated[str | None, PathRole("file"), Cli(flag="--target-text-file"), Field(
        default=None, max_length=4096, description="Text a phone printed (UTF-8 file)")] = None
    target_logits: Annotated[str | None, PathRole("file"), Cli(flag="--target-logits"), Field(
        default=None, max_length=4096,
        description=".npy of the text/phone target's logits, one row per step (steps x vocab)")] = None
    device_model_dir: Annotated[DeviceFolder, Cli(flag="--device-model-dir"), Field(
        description="Phone folder holding the model, its configs and llm_demo (absolute path): run the phone as "
        "the target")] = None
    device_config: Annotated[DeviceFileName, Cli(flag="--device-config"), Field(
        description="Config file name inside device_model_dir (the NPU one)")] = "config_qnn.json"
    serial: Serial = None
    llm_demo: Annotated[DeviceFolder, Cli(flag="--llm-demo"), Field(
        description="llm_demo on the phone (default: device_model_dir/llm_demo)")] = None
    lib_dir: Annotated[DeviceFolder, Cli(flag="--lib-dir"), Field(
        description="Phone folder with libMNN.so and the QNN libraries (default: device_model_dir)")] = None
    device_logits_diff: Annotated[bool, Cli(flag="--device-logits-diff"), Field(
        description="On the phone run MNN's llm_logits_diff between the CPU config and device_config (per-step "
        "logits on the device itself) instead of llm_demo")] = False
    device_cpu_config: Annotated[DeviceFileName, Cli(flag="--device-cpu-config"), Field(
        description="CPU config name inside device_model_dir for device_logits_diff")] = "config.json"
    llm_logits_diff: Annotated[DeviceFolder, Cli(flag="--llm-logits-diff"), Field(
        description="llm_logits_diff on the phone (default: device_model_dir/llm_logits_diff)")] = None
    max_memory: Annotated[str | None, Cli(flag="--max-memory"), Field(
        max_length=32, pattern=r"^\s*\d+(\.\d+)?\s*[kKmMgGtT]?(i?[bB])?\s*$",
        description="Peak memory per process, e.g. 3G: checked from the export's files before MNN's LLM runtime "
                    "starts and watched while it runs (default: a third of the free memory, at most 8G)")] = None
    image: Annotated[str | None, PathRole("file"), Cli(flag="--image"), Field(
        default=None, max_length=4096,
        description="Image for a vision-language export (PNG, JPEG or BMP): MNN's runtime runs visual.mnn on it; it "
        "goes where the prompt says <img>image_0</img>, else before the text (pushed to the phone for llm_demo)")] = None
    also_text_only: Annotated[bool, Cli(flag="--also-text-only"), Field(
        description="With --image: run the same comparison without the image too, to tell an image-path bug "
        "(visual.mnn, deepstack, image positions) from a text-path one")] = False

    def default_out(self) -> tuple[str, str] | None:
        return _leaf(self.export_dir), "llm-text"


def _stem(path: str) -> str:
    return PurePath(path).stem or "model"


def _leaf(path: str) -> str:
    return PurePath(path).name or "run"


# --- MNN on a phone or a host build ------------------------------------------------------------------------

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
        return _stem(self.model), f"{self.target}-run"


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


class CaseAddRequest(Request):
    """One solved problem to append to the cases file that triage reads."""

    category: Annotated[str, Cli(flag="--category"), Field(
        min_length=1, max_length=64, description="Triage category of the solved problem (e.g. convert_segfault)")]
    match: Annotated[str, Cli(flag="--match"), Field(
        min_length=1, max_length=300, description="A literal log line (or part of one) that identifies this problem")]
    cause: Annotated[str, Cli(flag="--cause"), Field(
        min_length=1, max_length=600, description="One sentence: what it really was")]
    fix: Annotated[str, Cli(flag="--fix"), Field(
        min_length=1, max_length=600, description="One sentence: what fixed it (command, flag, patch)")]
    source: Annotated[str, Cli(flag="--source"), Field(
        max_length=300, description="Issue URL, commit or run that confirmed it")] = ""
    cases: Annotated[str, PathRole("file"), Cli(flag="--cases"), Field(
        min_length=1, max_length=4096, description="Cases file to append to (created if absent)")] = "qnn-debug-cases.jsonl"


# --- fix: the fixed artefact for a verdict, proven --------------------------------------------------------

def parse_range_args(pairs: list[str] | None) -> dict[str, list[float]] | None:
    """``--input-range x=0:255`` (repeatable) as ``{"x": [0.0, 255.0]}``."""
    if not pairs:
        return None
    out: dict[str, list[float]] = {}
    for pair in pairs:
        name, sep, span = pair.rpartition("=")
        lo, colon, hi = span.partition(":")
        try:
            if not (sep and colon and name):
                raise ValueError(pair)
            out[name] = [float(lo), float(hi)]
        except ValueError:
            raise BadInputError(f"bad --input-range {pair!r}", hint="use NAME=MIN:MAX, e.g. --input-range x=0:255") from None
    return out


class FixRequest(Request):
    """A comparison whose verdict to fix: the fixed artefact is written next to the user's file and proven."""

    result: Annotated[str, PathRole("any"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The verdict to fix: a diagnose --out folder, its report/ "
        "folder, a compare JSON file (compare --json FILE), or an llmexport folder / its llm-check JSON")]
    model: Annotated[str | None, PathRole("file"), Cli(flag="--model"), Field(
        default=None, max_length=4096, description="The .onnx to fix (default: the one the comparison names)")] = None
    input_range: Annotated[
        dict[Annotated[str, Field(min_length=1, max_length=256)],
             Annotated[list[float], Field(min_length=2, max_length=2)]] | None,
        Cli(flag="--input-range", parse=parse_range_args, metavar="NAME=MIN:MAX"), Field(
            default=None, max_length=64, description='Declared range of each float input, e.g. {"x": [0, 255]} for raw '
            "pixels (on the command line x=0:255, repeatable): the rescale is sized from the worst case over it; "
            "default: the sample input's own min..max")] = None
    test_dir: Annotated[str | None, PathRole("dir"), Cli(flag="--test-dir"), Field(
        default=None, max_length=4096, description="input_not_copied: the ModuleBasic test dir the run used (its "
        "input.json gets shapeMutable false, the previous file kept)")] = None
    out: Out = Field(None, description="Folder of the proof runs (default: qnn-debug-runs/RESULT/fix)")
    soc: Soc = DEFAULT_SOC
    options: Annotated[TargetOptions | None, Cli(flag="--option", parse=parse_option_pairs, repeat=True, spread=True,
                                                 metavar="KEY=VALUE"), Field(
        default=None, description="A host MNN build to prove a fix of MNN's QNN translation on (mnn_build_dir, "
        "qnn_lib_dir, qnn_sdk; on the command line --option key=value): the fixed model is diagnosed on it")] = None
    cases: Annotated[str | None, PathRole("file"), Cli(flag="--cases", default="qnn-debug-cases.jsonl"), Field(
        default=None, max_length=4096, description="Cases file that gets the solved case once every proof check "
        "passed (created if absent; triage reads it); the command line's default is qnn-debug-cases.jsonl")] = None
    timeout: Timeout = 1800.0
    force: Force = False

    def default_out(self) -> tuple[str, str] | None:
        return _stem(self.result), "fix"
