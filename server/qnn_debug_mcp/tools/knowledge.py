"""Knowledge tools: ``triage_log``, ``lookup_op_constraints``, ``toggle_shapeMutable``.

They only read files or tables (no MNN, no onnxruntime), each in a short-lived child process that the
per-call limit (``--call-timeout``) or a cancel kills (see ``child_call``); the op probe on the HTP
simulator loads onnxruntime-qnn and runs as an engine CLI child process.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from qnn_debug.mnn.soc import DEFAULT_SOC, default_soc_help
from qnn_debug.ops.models import OpConstraints
from qnn_debug.triage.models import TriageResult

from .. import quick_tasks
from ..args import ClientRoots, PathArg
from ..errors import tool_error
from ..playbooks import playbook_uri
from ..tool_context import app_state, engine, quick, respond, tool, workspace

READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
EDITS_TESTDIR = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
ProbeShape = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[0-9x]+(:[a-z0-9]+)?(=[-0-9.,eE+]*)?$")]
MAX_LOG_CHARS = 2_000_000
CASES_FILE = "qnn-debug-cases.jsonl"


class ShapeMutableChange(BaseModel):
    """What toggle_shapeMutable did to the test dir's input.json."""

    file: str
    old: bool | None = Field(description="previous value; null = key absent (ModuleBasic's default, true)")
    new: bool
    changed: bool
    backup: str | None = Field(None, description="copy of the previous input.json, when it changed")


LogPath = Annotated[str | None, Field(default=None, max_length=4096,
                                      description="A log file inside the workspace (any size); give this or log_text.")]


class TriageAnswer(TriageResult):
    """The engine's triage result plus the MCP resource of the playbook it names."""

    playbook_uri: str | None = Field(None, description="read this resource for the fix-it steps")


def register(server: MCPServer) -> None:
    @tool(server, title="Triage a QNN/MNN error log", annotations=READ_ONLY_LOCAL)
    async def triage_log(
        ctx: Context,
        roots: ClientRoots,
        log_text: Annotated[str | None, Field(default=None, max_length=MAX_LOG_CHARS,
                                              description="The log itself (stdout+stderr of the failing run)")] = None,
        log_path: LogPath = None,
        cases_path: Annotated[str | None, Field(default=None, max_length=4096, description=(
            "Cases file of past solved problems inside the workspace (JSON lines written by `qnn-debug case-add`); "
            "default: qnn-debug-cases.jsonl in the first workspace root when it exists"))] = None,
    ) -> Annotated[CallToolResult, TriageAnswer]:
        """First call when something failed. Give the failing run's output (MNN stdout, QNN/ORT
        log, logcat, crash backtrace) as `log_text`, or a log file inside the workspace as
        `log_path` (any size). Returns the failure category (e.g. graph finalize failed 1002,
        execute failed 6000 — with `Tensor usage is 1.` usually shapeMutable —, op validation
        3110/0xc26, op not registered, missing libs, export crash, wrong numbers), confidence, the
        evidence lines, decoded error codes, the playbook to read (`playbook_uri`) and the next
        tools to call."""
        if (log_text is None) == (log_path is None):
            raise tool_error("pass exactly one of log_text or log_path", "paste the log as log_text, or give log_path")
        limit = app_state(ctx).config.quick_timeout_s
        ws = workspace(ctx, roots)
        cases: str | None = None
        if cases_path is not None:
            cases = str(ws.resolve(cases_path, what="cases_path", kind="file"))
        elif ws.roots and (ws.roots[0] / CASES_FILE).is_file():
            cases = str(ws.resolve(CASES_FILE, what="cases_path", kind="file"))
        if log_path is not None:
            path = ws.resolve(log_path, what="log_path", kind="file")
            result = await quick(ctx, quick_tasks.triage, str(path), None, cases, limit_s=limit, what="triage", roots=ws.roots)
        else:
            result = await quick(ctx, quick_tasks.triage, None, log_text, cases, limit_s=limit, what="triage", roots=ws.roots)
        answer = TriageAnswer(**result.model_dump(), playbook_uri=playbook_uri(result.playbook))
        summary = f"{result.category} (confidence {result.confidence:.2f}): {result.title}"
        if answer.playbook_uri:
            summary += f"; read {answer.playbook_uri}"
        return respond(answer, summary)

    @tool(server, title="QNN/HTP constraints of an op", annotations=READ_ONLY_LOCAL)
    async def lookup_op_constraints(
        op: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]*$",
                                 description="MNN OpType name or number (e.g. "
                                 "Convolution or 17), ONNX op (Conv) or QNN op (Conv2d)")],
        ctx: Context,
        probe: Annotated[bool, Field(description="also build a one-op ONNX graph and try it on the HTP "
                                     "simulator (takes seconds)")] = False,
        shapes: Annotated[list[ProbeShape] | None, Field(max_length=8, description="probe inputs, one per input: "
                                                         "DIMS[:DTYPE][=V1,...], e.g. 1x64x56x56:float32; later "
                                                         "inputs become constants")] = None,
        attrs: Annotated[dict[Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                              Annotated[str, Field(max_length=200)]] | None,
                         Field(max_length=32, description='probe ONNX attributes, e.g. {"kernel_shape": "3,3"}')] = None,
        soc: Annotated[int, Field(ge=1, le=1000, description=f"soc_model of the probe ({default_soc_help()})")] = DEFAULT_SOC,
    ) -> Annotated[CallToolResult, OpConstraints]:
        """Look up what MNN's QNN backend does with an op and what Qualcomm's HTP accepts: the QNN
        op(s) MNN emits for it (or that it has no QNN implementation and falls back to CPU), its
        inputs and parameters, HTP dtype/rank/size constraints, fp16 and quantization traps, known
        MNN issues and workarounds — each fact with its source. Call it for the first failing op
        from compare/diagnose or the op named in a 3110/0xc26 error. With probe=true (and the
        failing `shapes`/`attrs`) it also tries the op alone on the HTP simulator and reports
        whether QNN accepts it."""
        cfg = app_state(ctx).config
        if probe or shapes or attrs:
            cmd = ["op", op, "--probe", "--soc", str(soc)]
            for spec in shapes or []:
                cmd += ["--shape", spec]
            for key, value in (attrs or {}).items():
                cmd += ["--attr", f"{key}={value}"]
            result = OpConstraints.model_validate(await engine(ctx, cmd, timeout=cfg.quick_timeout_s * 5))
        else:
            result = await quick(ctx, quick_tasks.lookup, op, limit_s=cfg.quick_timeout_s, what="op lookup")
        summary = f"{result.query} [{', '.join(result.kinds)}]: " + "; ".join(
            f"MNN {m.optype} ({m.number}) -> {', '.join(m.qnn_ops) or 'no QNN implementation'}" for m in result.mnn)
        summary += f"; {len(result.facts)} facts"
        if result.probe is not None:
            verdict = "accepted" if result.probe.accepted else f"rejected at {result.probe.stage}"
            summary += f"; simulator probe {verdict}: {result.probe.message}"
            if result.probe.rewrite is not None:
                rw = result.probe.rewrite
                summary += (f"; equivalent rewrite {rw.description} "
                            f"{'accepted' if rw.accepted else 'rejected'} on the simulator")
        return respond(result, summary)

    @tool(server, title="Set shapeMutable in an MNN test dir", annotations=EDITS_TESTDIR)
    async def toggle_shapeMutable(
        test_dir: PathArg,
        value: Annotated[bool, Field(description="false for QNN online runs; true is ModuleBasic's default")],
        ctx: Context,
        roots: ClientRoots,
    ) -> Annotated[CallToolResult, ShapeMutableChange]:
        """Set `shapeMutable` in a ModuleBasic test directory's input.json. With the default
        (true) MNN's QNN online backend can bake an input into the graph as a constant ("Tensor
        usage is 1.", sometimes error code 6000), so outputs stop depending on the input (compare
        verdict input_not_copied); false fixes that. The file is rewritten atomically and the
        previous version kept as input.json.bak; setting the value it already has changes
        nothing. Then re-run with run_on_device (testdir=...)."""
        ws = workspace(ctx, roots)
        folder = ws.resolve(test_dir, what="test_dir", kind="dir")
        done = await quick(ctx, quick_tasks.toggle, str(folder), value, roots=ws.roots, limit_s=app_state(ctx).config.quick_timeout_s,
                           what="toggle_shapeMutable")
        answer = ShapeMutableChange.model_validate(done)
        old = "absent (default true)" if answer.old is None else str(answer.old).lower()
        text = (f"shapeMutable {old} -> {str(answer.new).lower()} in {answer.file}" if answer.changed
                else f"shapeMutable already {str(answer.new).lower()} in {answer.file}; nothing changed")
        return respond(answer, text)
