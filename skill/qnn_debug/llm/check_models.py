"""The request and result of ``llm-check``, kept free of heavy imports so the MCP server can publish them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from . import sources as S
from .export_reader import QnnOutputs

Severity = Literal["error", "warning", "info"]
class LlmCheckRequest(BaseModel):
    """What to check: the llmexport folder, optionally generate_llm_qnn.py's outputs and the KV limit used."""

    export_dir: str
    qnn_dir: str | None = Field(default=None, description="generate_llm_qnn.py --cache_path dir or the model's qnn/ folder")
    max_history_token: int | None = Field(default=None, ge=0, description="the --max_history_token of generate_llm_qnn.py")
    image_sizes: str | None = Field(default=None, description="the --image_sizes of generate_llm_qnn.py (VL exports), WxH,...")


# The step of MNN's QNN LLM path at which a fault shows first (generate_llm_qnn.py's own step numbers, then the
# phone): a fault of an earlier step hides every later one, so findings are listed and fixed in this order.
STEPS = {
    1: "Step 1 generateIO (test inputs/outputs)",
    2: "Step 2 compilefornpu (NPU segments built on the QNN backend)",
    3: "Step 3 qnn-context-binary-generator (context binaries)",
    4: "on the phone (llm_demo with config_qnn.json)",
}
ORDER_NOTE = ("findings are ordered by the step each one breaks first (" + "; ".join(STEPS.values())
              + "), then by severity: fix them in this order, since a run stops at the first step that fails")


class Finding(BaseModel):
    id: str
    severity: Severity
    graph: str | None = Field(default=None, description=(
        "the model file the finding is about (llm.mnn, or visual.mnn of a vision-language export); None: the folder"))
    step: int | None = Field(default=None, description=(
        "the step this fault breaks first: 1 generateIO, 2 compilefornpu, 3 context-binary generation, 4 on the "
        "phone; None for notes that break no step"))
    title: str
    evidence: list[str] = Field(default_factory=list)
    consequence: str = ""
    remedy: str = ""
    how_to_see: str = ""
    sources: list[str] = Field(default_factory=list)


class ExportSettings(BaseModel):
    """Export settings, from export_args.json where present, else inferred from the model file."""

    source: str
    model_type: str | None = None
    hidden_size: int | None = None
    layers: int | None = None
    generate_for_npu: bool | None = None
    transformer_c4: bool | None = Field(default=None, description=(
        "True when export_args.json says so or llm.mnn holds a C4-fused op (the ops prove it was on)"))
    transformer_c4_evidence: str | None = None
    weight_bits: int | None = None
    weight_symmetric: bool | None = None
    calibration: str | None = None  # smooth / omni / None
    activation_bits: int | None = None
    activation_symmetric: bool | None = None
    quantized_tensors: int = 0
    attention_mask_config: str | None = None  # llm_config.json
    attention_mask_model: str | None = None  # dtype of the .mnn input
    kv_limit: int
    kv_limit_source: str


class IoRow(BaseModel):
    """One input of one graph: what generate_llm_qnn.py's IO config will give it and what the graph declares."""

    graph: str
    name: str
    io_config: list[int] | None = Field(description="shape in the IO config (None: the config lacks it)")
    declared: list[int] | None = Field(description="shape the graph declares, -1 for dynamic (None: no such input)")
    problem: str | None = None


class VisualSummary(BaseModel):
    """The vision encoder of a VL export, as llm-check read it."""

    model: str
    ops: int
    inputs: dict[str, list[int]]
    outputs: list[str]
    npu_segments: int
    segments: int
    image_sizes: list[tuple[int, int]] = Field(default_factory=list, description="--image_sizes as W, H (the script's default 512x512 when none was given)")
    vision_seq: list[int] = Field(default_factory=list, description="patches rows of each compiled image size")


class SegmentSummary(BaseModel):
    index: int
    npu: bool
    ops: int
    first_op: str
    last_op: str
    first_op_index: int = Field(description="position of first_op in llm.mnn's op list (as in the findings' 'op N')")
    last_op_index: int


class LlmCheckResult(BaseModel):
    export_dir: str
    model: str
    ops: int
    settings: ExportSettings
    segments: list[SegmentSummary]
    findings: list[Finding]
    order: str = ORDER_NOTE
    qnn_outputs: QnnOutputs | None = None
    visual: VisualSummary | None = Field(default=None, description="the vision encoder of a VL export (visual.mnn)")
    io_config: list[IoRow] = Field(default_factory=list, description=(
        "VL exports: each graph input as generate_llm_qnn.py's IO config for this folder name feeds it and as the graph "
        "declares it"))
    mnn_commit: str = S.MNN_COMMIT

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)
