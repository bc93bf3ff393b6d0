"""LLM-path tools: ``check_llm_export`` (static check of an llmexport folder).

It reads a few files and walks the op list, so it runs in a worker thread of the server process
(no MNN import) and answers in well under a second.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from qnn_debug.llm.check import LlmCheckRequest, LlmCheckResult

from ..args import ClientRoots, PathArg
from ..calls import app_state, quick, respond, tool, workspace

READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


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
        result = await quick(_check, request, limit_s=app_state(ctx).config.quick_timeout_s * 4, what="llm check")
        errors = [f.id for f in result.findings if f.severity == "error"]
        summary = (f"{len(result.findings)} finding(s), {len(errors)} error(s)" + (f": {', '.join(errors)}" if errors else "")
                   + f"; {sum(s.npu for s in result.segments)} NPU segment(s) at KV limit {result.settings.kv_limit}")
        return respond(result, summary)


def _check(request: LlmCheckRequest) -> LlmCheckResult:
    from qnn_debug.llm.check import check_llm_export

    return check_llm_export(request)
