"""Requests of the numeric workflow: CPU baseline, target dump, diagnose, compare, bisect and localise-blocks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..targets import DEFAULT_TARGET
from .fields import Cli, PathRole, ServerSet
from .request_base import (
    QNN_TARGETS,
    Cluster,
    Force,
    InputsOrTestDir,
    MaxMemory,
    MnnGate,
    Out,
    Precision,
    ReferenceModel,
    Request,
    Seed,
    Shapes,
    TargetRun,
    Workers,
    out_leaf,
    out_stem,
)


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
        return out_stem(self.model), "baseline"


class DumpRequest(TargetRun):
    """A model to run on a QNN target, capturing every intermediate tensor and refusing any CPU fallback."""

    precision: Precision = "fp16"
    out: Out = Field(None, description="Run directory (default: qnn-debug-runs/MODEL/TARGET-PRECISION)")

    def default_out(self) -> tuple[str, str] | None:
        return out_stem(self.model), f"{self.target}-{self.precision}"


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
    workers: Workers = None
    cluster: Cluster = None

    def default_out(self) -> tuple[str, str] | None:
        return out_stem(self.model), f"diagnose-{self.target}"


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
        return "compare", out_leaf(self.target)


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
    workers: Workers = Field(None, description="htp-sim, a model run piece by piece: probes at once on this machine "
                             "(1: one after another, the binary search; default: every core, through an embedded Ray "
                             "cluster, when the model holds 256 MB of weights or more)")
    cluster: Cluster = Field(None, description="htp-sim, a model run piece by piece: send the probes to the Ray cluster "
                             "at this address (HOST:PORT of its head); every node reads the model and --out at the "
                             "same paths")

    def default_out(self) -> tuple[str, str] | None:
        return out_stem(self.model), f"bisect-{self.target}"


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
        return out_stem(self.model), f"{leaf}-{self.graph}" if self.graph else leaf

