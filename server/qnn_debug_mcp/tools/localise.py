"""Localisation tools for when one all-tensor dump is impossible or untrustworthy: ``bisect``, ``localise_blocks``.

They publish their engine operations under the shared inline/job policy, like ``diagnose``.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer

from ..publish import OpTool, model_stem, publish
from .analysis import WRITES_RUNS_MAYBE_DEVICE, steps_text

BISECT = """The fallback when no all-tensor dump is possible or trustworthy (LLM path without a dump
switch, an old build answering 7004, a dump whose marking changes the graph): cuts the .onnx
model after an op, runs the truncated model unmarked on the target, compares the cut's
tensors with the CPU reference against the fp16 floor, and narrows in about log2(N) probes.
Returns `result.first_failing` (op, op type, position, tensor, SQNR vs floor), the verdict
(real_bug / precision / ok), every probe, and the first tensor beyond the fp16 range."""

BLOCKS = """For LLM exports (node names with /layers.N/, e.g. llmexport's onnx/llm.onnx at the fixed
prefill shape) and a VL export's vision encoder (visual.onnx, /blocks.N/; or the VL export folder
with `graph` visual or llm): cuts every block out as a standalone graph, feeds it the values
the CPU reference computes at its input, runs each on the target and judges its outputs
against the block's own fp16 floor; on htp-sim the ops outside the layers (rotary tables,
deepstack adds, mergers, the head) are judged as segments of their own, and a result the target
graph never computes (a dropped add) is named. Then finds the first failing op inside the
first bad block (htp-sim: `inner`, whose diagnosis names rotary layouts such as 2-D rows swapped
or M-RoPE chunked vs interleaved; device/host: the block's own dump compared tensor by tensor).
VL graphs without `inputs` get runtime-shaped ids, masks, idx/weight tensors and deepstack features
(`image` for the patches). Returns `graph`, every segment's worst excess, `first_failing_block`,
`first_failing` (op inside it), `block_pattern` and the first tensor beyond the fp16 range."""


def summarize_bisect(r: dict[str, Any]) -> str:
    probes = r.get("probes") or []
    text = f"verdict {r.get('verdict')} after {len(probes)} probes over {r.get('cut_points')} cuts: {r.get('summary', '')}"
    return f"{text}{steps_text(r)} Results in {r.get('out')}."


def summarize_blocks(r: dict[str, Any]) -> str:
    return f"verdict {r.get('verdict')}: {r.get('summary', '')}{steps_text(r)} Results in {r.get('out')}."


def register(server: MCPServer) -> None:
    publish(server, OpTool("bisect", "bisect", "Bisect to the first failing op (no dump needed)", WRITES_RUNS_MAYBE_DEVICE,
                           BISECT, summarize=summarize_bisect, long=True, auto_background=True,
                           job_title=lambda r: f"bisect of {model_stem(r)} on {getattr(r, 'target', '?')}"))
    publish(server, OpTool("localise_blocks", "localise_blocks", "Localise the failing block of an LLM decoder or VL vision encoder",
                           WRITES_RUNS_MAYBE_DEVICE, BLOCKS, summarize=summarize_blocks, long=True, auto_background=True,
                           job_title=lambda r: f"block localisation of {model_stem(r)}"))
