"""Knowledge tools: ``triage_log``, ``lookup_op_constraints``, ``toggle_shapeMutable``.

Each runs its engine operation in a short-lived child process that the per-call limit
(``--call-timeout``; a simulator probe gets five times that) or a cancel kills (see :mod:`..engine_child`).
"""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from qnn_debug.mnn.models import ToggleResult
from qnn_debug.ops.models import OpConstraints
from qnn_debug.triage.models import TriageResult

from ..config import ServerConfig
from ..playbooks import playbook_uri
from ..publish import OpTool, publish
from ..workspace import Workspace

READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
EDITS_TESTDIR = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
CASES_FILE = "qnn-debug-cases.jsonl"  # the engine's default name (qnn_debug.triage.cases.DEFAULT_NAME)


class TriageAnswer(TriageResult):
    """The engine's triage result plus the MCP resource of the playbook it names."""

    playbook_uri: str | None = Field(None, description="read this resource for the fix-it steps")


TRIAGE = """First call when something failed. Give the failing run's output (MNN stdout, QNN/ORT
log, logcat, crash backtrace) as `log_text`, or a log file inside the workspace as
`log_path` (any size). Returns the failure category (e.g. graph finalize failed 1002,
execute failed 6000 — with `Tensor usage is 1.` usually shapeMutable —, op validation
3110/0xc26, op not registered, missing libs, export crash, wrong numbers), confidence, the
evidence lines, decoded error codes, the playbook to read (`playbook_uri`) and the next
tools to call. `basis` says what decided it (signature, words, structure, none); when
`low_confidence` is true, `low_confidence_reason` says what would settle it."""

LOOKUP = """Look up what MNN's QNN backend does with an op and what Qualcomm's HTP accepts: the QNN
op(s) MNN emits for it (or that it has no QNN implementation and falls back to CPU), its
inputs and parameters, HTP dtype/rank/size constraints, fp16 and quantization traps, known
MNN issues and workarounds — each fact with its source. Call it for the first failing op
from compare/diagnose or the op named in a 3110/0xc26 error. With probe=true (and the
failing `shapes`/`attrs`) it also tries the op alone on the HTP simulator and reports
whether QNN accepts it."""


TOGGLE = """Set `shapeMutable` in a ModuleBasic test directory's input.json. With the default
(true) MNN's QNN online backend can bake an input into the graph as a constant ("Tensor
usage is 1.", sometimes error code 6000), so outputs stop depending on the input (compare
verdict input_not_copied); false fixes that. The file is rewritten atomically and the
previous version kept as input.json.bak; setting the value it already has changes
nothing. Then re-run with run_on_device (testdir=...)."""


def summarize_toggle(answer: ToggleResult) -> str:
    old = "absent (default true)" if answer.old is None else str(answer.old).lower()
    return (f"shapeMutable {old} -> {str(answer.new).lower()} in {answer.file}" if answer.changed
            else f"shapeMutable already {str(answer.new).lower()} in {answer.file}; nothing changed")


def triage_answer(result: BaseModel) -> TriageAnswer:
    assert isinstance(result, TriageResult)
    return TriageAnswer(**result.model_dump(), playbook_uri=playbook_uri(result.playbook))


def summarize_triage(answer: TriageAnswer) -> str:
    summary = f"{answer.category} (confidence {answer.confidence:.2f}, basis {answer.basis}): {answer.title}"
    if answer.low_confidence:
        summary += f"; LOW CONFIDENCE: {answer.low_confidence_reason}"
    return summary + (f"; read {answer.playbook_uri}" if answer.playbook_uri else "")


def workspace_cases(request: BaseModel, ws: Workspace) -> BaseModel:
    """The cases file of the first workspace root, when the caller named none and it exists."""
    if getattr(request, "cases_path", None) is None and ws.roots and (ws.roots[0] / CASES_FILE).is_file():
        return request.model_copy(update={"cases_path": str(ws.resolve(CASES_FILE, what="cases_path", kind="file"))})
    return request


def summarize_lookup(result: OpConstraints) -> str:
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
    return summary


def lookup_limit(config: ServerConfig, request: BaseModel) -> float:
    """A simulator probe loads onnxruntime-qnn and builds a graph: it may take a few times a plain lookup."""
    probing = bool(getattr(request, "probe", False) or getattr(request, "shapes", None) or getattr(request, "attrs", None))
    return config.quick_timeout_s * (5 if probing else 1)


def register(server: MCPServer) -> None:
    publish(server, OpTool("triage", "triage_log", "Triage a QNN/MNN error log", READ_ONLY_LOCAL, TRIAGE,
                           summarize=summarize_triage, answer=TriageAnswer, shape=triage_answer,
                           prepare=workspace_cases))
    publish(server, OpTool("op_lookup", "lookup_op_constraints", "QNN/HTP constraints of an op", READ_ONLY_LOCAL,
                           LOOKUP, summarize=summarize_lookup, limit=lookup_limit))
    publish(server, OpTool("toggle_shape_mutable", "toggle_shapeMutable", "Set shapeMutable in an MNN test dir",
                           EDITS_TESTDIR, TOGGLE, summarize=summarize_toggle, require=("value",)))
