"""Requests of the LLM checks: an llmexport folder's static check and its text compared between runtimes."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .fields import Cli, PathRole
from .request_base import DeviceFileName, DeviceFolder, Out, Request, Serial, out_leaf


class LlmCheckRequest(Request):
    """An llmexport folder (and optionally generate_llm_qnn.py's outputs) to check for the QNN LLM path."""

    export_dir: Annotated[str, PathRole("dir", as_given=True), Cli(positional=True), Field(
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
        return out_leaf(self.export_dir), "llm-text"

