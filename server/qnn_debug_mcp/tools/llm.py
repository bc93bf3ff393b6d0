"""LLM-path tools: ``check_llm_export`` (static check of an llmexport folder) and ``compare_llm_text``.

The check reads a few files and walks the op list (no MNN import), in a child bounded by the per-call
limit; the text comparison runs MNN's LLM runtime (and maybe a phone) under the shared inline/job policy.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from qnn_debug.llm.check_models import LlmCheckResult

from ..config import ServerConfig
from ..publish import OpTool, model_stem, publish

READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES_RUNS_MAYBE_DEVICE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                           open_world_hint=True)

CHECK = """First call for an LLM on the NPU (llmexport.py --generate_for_npu -> generate_llm_qnn.py ->
compilefornpu -> llm_demo) when compilefornpu crashed (SIGSEGV, #4716), context-binary
generation failed with 3110/0xc26, or the phone prints garbled text. Reads the export folder
(config.json, llm_config.json, export_args.json, llm.mnn) and optionally generate_llm_qnn.py's
outputs, models compilefornpu's NPU segments, and reports: ops MNN's QNN backend does not
implement inside an NPU segment (C4-fused RoPE/FusedLinear/GatedRMSNorm, LinearAttention),
activation quantization on integer tensors (position ids, Gather indices), Mul outputs that
reuse an operand's encoding (SwiGLU saturation), attention-mask dtype, KV limit and the
model-family guess from the folder name — each with evidence, remedy and MNN source lines.
Vision-language exports (Qwen3-VL: is_visual, visual.mnn): visual.mnn gets the same op and
integer-encoding checks (each finding's `graph` says which file), the IO configs
generate_llm_qnn.py will write for this folder name (makeIOJson / makeVLIOJson) are held against
both graphs' inputs (`io_config`), plus deepstack (input, runtime flag, the encoder output the
visual config drops), the encoder input order the runtime needs, a missing visual.mnn, and
`image_sizes` (the --image_sizes you give the script) against the runtime's resize rule."""

TEXT = """For garbled or wrong LLM text on the phone. Runs the export folder on CPU with the MNN wheel's
LLM runtime (greedy, per-step logits) as the reference, then one target: llm_demo on the phone
(`device_model_dir` holding config_qnn.json and llm_demo; a greedy copy of the config is used,
the original is left alone), another export folder (`target_export`, e.g. the NPU export vs the
float one, with logits), or a text you captured (`target_text`). Teacher-forces the reference
along the target's tokens and returns the first divergent token (with the reference's logit
margin: near tie or broken), top-1 agreement, per-step logits SQNR when the target has logits,
garbled-text signals (mixed scripts, `!!!!` runs, U+FFFD) and a verdict. With
`device_logits_diff` the phone runs MNN's llm_logits_diff (CPU config vs NPU config, teacher-forced)
and `result.device_diff` holds its per-step disagreement, margins, max |Δlogit| and KL."""


def summarize_text(r: dict[str, Any]) -> str:
    return f"{r.get('verdict')}: {r.get('summary', '')} Results in {r.get('out')}."


def summarize_check(result: LlmCheckResult) -> str:
    errors = [f.id for f in result.findings if f.severity == "error"]
    return (f"{len(result.findings)} finding(s), {len(errors)} error(s)" + (f": {', '.join(errors)}" if errors else "")
            + f"; {sum(s.npu for s in result.segments)} NPU segment(s) at KV limit {result.settings.kv_limit}"
            + (f"; visual.mnn {result.visual.npu_segments} NPU segment(s)" if result.visual is not None else ""))


def check_limit(config: ServerConfig, request: BaseModel) -> float:
    """Reading a big llm.mnn's op list takes longer than a log triage."""
    return config.quick_timeout_s * 4


def register(server: MCPServer) -> None:
    publish(server, OpTool("llm_check", "check_llm_export", "Check an MNN LLM export for the QNN path", READ_ONLY_LOCAL,
                           CHECK, summarize=summarize_check, limit=check_limit))
    publish(server, OpTool("llm_text", "compare_llm_text", "Compare an LLM's text and logits with MNN's CPU reference",
                           WRITES_RUNS_MAYBE_DEVICE, TEXT, summarize=summarize_text, long=True, auto_background=True,
                           job_title=lambda r: f"LLM text of {model_stem(r, 'export_dir')}"))
