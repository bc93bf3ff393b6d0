"""What ``llm-text`` takes and returns (pydantic only, no numpy; :mod:`.text` re-exports them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .garbled import GarbledReport
from .image import ImageInput
from .llm_demo import DemoOutput, DeviceTextTarget
from .logits_diff import DeviceLogitsDiff


class LlmTextRequest(BaseModel):
    """Reference folder, prompt, and at most one target."""

    export_dir: str
    prompt: str = Field(default="Hello", min_length=1, max_length=4000)
    max_new_tokens: int = Field(default=32, ge=1, le=512)
    out: str = Field(description="run directory for logits and logs (created)")
    target_export: str | None = Field(default=None, description="another export folder, run on MNN CPU the same way")
    target_text: str | None = Field(default=None, max_length=200_000, description="text a phone printed")
    target_logits: str | None = Field(default=None, description=".npy [steps, vocab] logits of the target, if it has them")
    device: DeviceTextTarget | None = None
    device_logits_diff: bool = Field(default=False, description="on the phone, run llm_logits_diff between the CPU "
                                     "config (device.cpu_config) and device.config instead of llm_demo")
    max_memory: int | None = Field(default=None, ge=1, description="peak bytes per process (None: a third of the "
                                   "free memory, at most 8 GiB): checked before MNN.llm starts and while it runs")
    image: str | None = Field(default=None, description="image file for a vision-language export (placed at "
                              "<img>image_0</img> in the prompt, else before the text)")
    also_text_only: bool = Field(default=False, description="with an image: run the same comparison again without it, "
                                 "to tell an image-path bug from a text-path bug")


class TextRun(BaseModel):
    source: str
    prompt_ids: list[int] = Field(default_factory=list)
    tokens: list[int] = Field(default_factory=list)
    text: str = ""
    undecodable_pieces: int = 0
    logits: str | None = None
    garbled: GarbledReport | None = None
    demo: DemoOutput | None = None
    image_tokens: int | None = Field(default=None, description="image pad tokens MNN put in the prompt (VL runs)")


class Divergence(BaseModel):
    step: int
    reference_token: int
    target_token: int
    reference_piece: str | None = None
    target_piece: str | None = None
    margin: float = Field(description="reference logit of its top-1 minus that of the target's token")
    target_rank: int = Field(description="rank of the target's token in the reference logits (0 = top-1)")
    near_tie: bool


class TextComparison(BaseModel):
    steps: int
    first_divergence: Divergence | None = None
    top1_agreement: float
    agreeing_prefix: int
    logits_sqnr_db: list[float | None] = Field(default_factory=list)
    logits_sqnr_min_db: float | None = None
    logits_sqnr_median_db: float | None = None


class LlmTextResult(BaseModel):
    out: str
    prompt: str
    reference: TextRun
    target: TextRun | None = None
    comparison: TextComparison | None = None
    device_diff: DeviceLogitsDiff | None = None
    verdict: Literal["reference_only", "match", "near_tie_flip", "diverged", "garbled"]
    summary: str
    notes: list[str] = Field(default_factory=list)
    image: ImageInput | None = None
    mnn_version: str | None = Field(default=None, description="version of the MNN runtime that made the reference")
    text_only: LlmTextResult | None = Field(default=None, description="the same comparison without the image")
    image_path: Literal["image_path", "text_path", "both_fine"] | None = Field(
        default=None, description="with also_text_only: where the divergence lives, from the two verdicts")
