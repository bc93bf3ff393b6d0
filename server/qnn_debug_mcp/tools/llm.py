"""LLM-path tools: ``check_llm_export`` (static check of an llmexport folder) and ``compare_llm_text``.

The check reads a few files and walks the op list (no MNN import); it runs in a killable child process
bounded by the per-call limit. The text comparison runs MNN's LLM runtime (and
maybe a phone) through the engine CLI as a child process, under the shared inline/job policy.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from qnn_debug.llm.check_models import LlmCheckRequest, LlmCheckResult

from .. import quick_tasks
from ..args import Background, ClientRoots, OutPath, PathArg
from ..cli_child import engine_work
from ..long_runs import run_long
from ..models import LongToolAnswer
from ..target_options import Serial
from ..tool_context import app_state, engine_roots, new_output, quick, respond, tool, workspace

READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES_RUNS_MAYBE_DEVICE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                           open_world_hint=True)


def summarize_text(r: dict[str, Any]) -> str:
    return f"{r.get('verdict')}: {r.get('summary', '')} Results in {r.get('out')}."


def register(server: MCPServer) -> None:
    @tool(server, title="Check an MNN LLM export for the QNN path", annotations=READ_ONLY_LOCAL)
    async def check_llm_export(
        export_dir: PathArg,
        ctx: Context,
        roots: ClientRoots,
        qnn_dir: Annotated[str | None, Field(default=None, max_length=4096,
                                             description="generate_llm_qnn.py's --cache_path dir or the model's qnn/ folder")] = None,
        max_history_token: Annotated[int | None, Field(default=None, ge=0, le=1_000_000,
                                                       description="the --max_history_token used with generate_llm_qnn.py")] = None,
    ) -> Annotated[CallToolResult, LlmCheckResult]:
        """First call for an LLM on the NPU (llmexport.py --generate_for_npu -> generate_llm_qnn.py ->
        compilefornpu -> llm_demo) when compilefornpu crashed (SIGSEGV, #4716), context-binary
        generation failed with 3110/0xc26, or the phone prints garbled text. Reads the export folder
        (config.json, llm_config.json, export_args.json, llm.mnn) and optionally generate_llm_qnn.py's
        outputs, models compilefornpu's NPU segments, and reports: ops MNN's QNN backend does not
        implement inside an NPU segment (C4-fused RoPE/FusedLinear/GatedRMSNorm, LinearAttention),
        activation quantization on integer tensors (position ids, Gather indices), Mul outputs that
        reuse an operand's encoding (SwiGLU saturation), attention-mask dtype, KV limit and the
        model-family guess from the folder name — each with evidence, remedy and MNN source lines."""
        ws = workspace(ctx, roots)
        folder = ws.resolve(export_dir, what="export_dir", kind="dir")
        qdir = str(ws.resolve(qnn_dir, what="qnn_dir", kind="dir")) if qnn_dir else None
        request = LlmCheckRequest(export_dir=str(folder), qnn_dir=qdir, max_history_token=max_history_token)
        result = await quick(ctx, quick_tasks.check_llm, request, limit_s=app_state(ctx).config.quick_timeout_s * 4, what="llm check",
                             roots=ws.roots)
        errors = [f.id for f in result.findings if f.severity == "error"]
        summary = (f"{len(result.findings)} finding(s), {len(errors)} error(s)" + (f": {', '.join(errors)}" if errors else "")
                   + f"; {sum(s.npu for s in result.segments)} NPU segment(s) at KV limit {result.settings.kv_limit}")
        return respond(result, summary)


    @tool(server, title="Compare an LLM's text and logits with MNN's CPU reference", annotations=WRITES_RUNS_MAYBE_DEVICE)
    async def compare_llm_text(
        export_dir: PathArg,
        ctx: Context,
        roots: ClientRoots,
        prompt: Annotated[str, Field(min_length=1, max_length=4000, description="fixed prompt (one line for llm_demo)")] = "Hello",
        max_new_tokens: Annotated[int, Field(ge=1, le=512, description="tokens to generate (and compare)")] = 32,
        out: OutPath = None,
        target_export: Annotated[str | None, Field(default=None, max_length=4096,
                                                   description="another export folder, run on MNN CPU the same way")] = None,
        target_text: Annotated[str | None, Field(default=None, max_length=100_000, description="text a phone printed")] = None,
        device_model_dir: Annotated[str | None, Field(default=None, max_length=512, pattern=r"^/[A-Za-z0-9._/+-]*$",
                                                      description="phone folder holding the model, its configs and "
                                                      "llm_demo (absolute path): run the phone as the target")] = None,
        device_config: Annotated[str, Field(max_length=255, pattern=r"^[A-Za-z0-9._-]+$",
                                            description="config file name inside device_model_dir (the NPU one)")] = "config_qnn.json",
        serial: Serial = None,
        llm_demo: Annotated[str | None, Field(default=None, max_length=512, pattern=r"^/[A-Za-z0-9._/+-]*$",
                                              description="llm_demo on the phone (default: device_model_dir/llm_demo)")] = None,
        device_logits_diff: Annotated[bool, Field(description="on the phone run MNN's llm_logits_diff between the "
                                                  "folder's config.json (CPU) and device_config (NPU): per-step logits "
                                                  "on the device itself")] = False,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """For garbled or wrong LLM text on the phone. Runs the export folder on CPU with the MNN wheel's
        LLM runtime (greedy, per-step logits) as the reference, then one target: llm_demo on the phone
        (`device_model_dir` holding config_qnn.json and llm_demo; a greedy copy of the config is used,
        the original is left alone), another export folder (`target_export`, e.g. the NPU export vs the
        float one, with logits), or a text you captured (`target_text`). Teacher-forces the reference
        along the target's tokens and returns the first divergent token (with the reference's logit
        margin: near tie or broken), top-1 agreement, per-step logits SQNR when the target has logits,
        garbled-text signals (mixed scripts, `!!!!` runs, U+FFFD) and a verdict. With
        `device_logits_diff` the phone runs MNN's llm_logits_diff (CPU config vs NPU config, teacher-forced)
        and `result.device_diff` holds its per-step disagreement, margins, max |Δlogit| and KL."""
        ws = workspace(ctx, roots)
        folder = ws.resolve(export_dir, what="export_dir", kind="dir")
        run_dir = new_output(ctx, ws, out, group=folder.name, leaf="llm-text")
        cmd = ["llm-text", str(folder), "--out", str(run_dir), "--max-new-tokens", str(max_new_tokens)]
        cmd += ["--prompt", prompt]
        if target_export:
            cmd += ["--target-export", str(ws.resolve(target_export, what="target_export", kind="dir"))]
        if target_text is not None:
            cmd += ["--target-text", target_text]
        if device_model_dir:
            cmd += ["--device-model-dir", device_model_dir, "--device-config", device_config]
            if serial:
                cmd += ["--serial", serial]
            if llm_demo:
                cmd += ["--llm-demo", llm_demo]
            if device_logits_diff:
                cmd.append("--device-logits-diff")
        cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="compare_llm_text", title=f"LLM text of {folder.name}", work=engine_work(ctx, cmd),
                              background=background, auto_background=True, summarize=summarize_text)
