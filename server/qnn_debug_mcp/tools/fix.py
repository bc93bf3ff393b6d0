"""The ``fix_and_prove`` tool: the fixed artefact for a verdict, written next to the user's file, and its proof."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from ..publish import OpTool, model_stem, publish
from ..workspace import Workspace

WRITES_FILES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                               open_world_hint=False)
CASES_FILE = "qnn-debug-cases.jsonl"  # the engine's default name (qnn_debug.triage.cases.DEFAULT_NAME)

FIX = """Step 6 after compare/diagnose: for a verdict it knows, writes the fixed file next to the user's
(a new file, never overwriting) and proves it. precision from the fp16 range (pattern nan_inf or a
range-saturation name, evidence fp16_range): an exact power-of-two rescale around the scale-invariant
op (folded into the producing Conv/MatMul's weights and bias, or a Mul where the tensor also feeds
other ops; eps scaled with it), sized by interval arithmetic over `input_range` (e.g. {"x": [0, 255]}
for raw pixels; default: the sample's min..max); proof: fp32 outputs within 1 ulp of the original on
the sample and the range's corner input (every value at its end: one input, not the worst; the
interval bound in `sites` covers every input), the baseline's range analysis clean on both, and the HTP
simulator's verdict without the range finding with outputs at the fp16 floor. An ONNX fix also writes
`mnn.path`: the fixed `.mnn` beside the user's `.mnn` (bizCode read from it; else beside the .onnx), gated
on MNN CPU; name both paths. real_bug at a fused
MNN op (Deconvolution/Convolution) that lost its Relu: the Relu becomes Max(x, 0), which MNN's
converter keeps as its own BinaryOp; proof: the converted .mnn no longer fuses it, fp32 and MNN CPU
still match; `not_proven` names the phone run that proves MNN's QNN translation; with `options`
(mnn_build_dir, qnn_lib_dir) it is proven on a host build: the fused op's jump gone, no op jumping, and
`left` says what the outputs still lack against the floor and the QNN EP. An llmexport folder
(or its llm-check JSON): the re-export and generate_llm_qnn.py command lines for it, and activation
encodings on integer tensors removed from llm.mnn in place (previous file kept as llm.mnn.previous)
once the edit is shown to touch nothing else and llm-check no longer reports it. quantization at
a clipping encoding (encoding_range; `model` = the QDQ .onnx the target ran): the encoding recomputed
from the reference range, written as a new QDQ model and an encoding-override JSON, re-run quantized
on the simulator. input_not_copied:
shapeMutable false in `test_dir` (previous input.json kept) and the re-run command, stated as not
provable without the phone. Returns before/after verdict and SQNR (first failing tensor, outputs);
a solved case goes to the workspace's cases file only once every check passed."""


def summarize_fix(r: dict[str, Any]) -> str:
    failed = [c.get("name") for c in r.get("proof") or [] if not c.get("passed")]
    state = (f"NOT proven (failed: {'; '.join(map(str, failed))})" if failed else "not proven" if not r.get("proven")
             else "PROVEN here (the rest needs the phone)" if r.get("not_proven") else "PROVEN")
    mnn = r.get("mnn") or {}
    shipped = f" Fixed .mnn: {mnn['path']}." if mnn.get("path") else ""
    left = f" Left: {' '.join(r['left'])}" if r.get("left") else ""
    return f"{state} {r.get('kind')} fix: {r.get('summary', '')}{shipped}{left}"


def workspace_cases(request: BaseModel, ws: Workspace) -> BaseModel:
    """The cases file of the first workspace root, when the caller named none."""
    if getattr(request, "cases", None) is None and ws.roots:
        return request.model_copy(update={"cases": str(ws.resolve(CASES_FILE, what="cases", kind="file",
                                                                   must_exist=False))})
    return request


def register(server: MCPServer) -> None:
    publish(server, OpTool("fix", "fix_and_prove", "Write the fix for a verdict and prove it", WRITES_FILES, FIX,
                           summarize=summarize_fix, long=True, auto_background=True, prepare=workspace_cases,
                           job_title=lambda r: f"fix of {model_stem(r, 'result')}"))
