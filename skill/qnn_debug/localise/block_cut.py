"""What block localisation on every target shares: the request, the cut into blocks, the saved block, the wording.

:mod:`.blocks` (targets that run every block in one session) and :mod:`.blocks_mnn` (targets that dump each
block) both build on it, so neither imports the other's internals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ..compare.thresholds import Thresholds
from ..errors import BadInputError
from ..next_step import step
from ..targets import DEFAULT_TARGET
from .bisect import RangeFinding, first_out_of_range
from .cut import Block, block, block_model, decoder_layers
from .models import BlockCheck, BlockResult

RESULT_FILE = "blocks.json"


class BlockRequest(BaseModel):
    model: Path  # what the target runs (.onnx); ``reference_model`` (default: the same) feeds the reference
    out: Path
    reference_model: Path | None = None
    inputs: Path | None = None  # the prefill inputs (.npz); default: seeded data of the model's static shapes
    # a VL vision encoder's patches from this image (resized to the model's grid); VL graphs without inputs get
    # runtime-shaped ids, mask, idx/weight tensors and deepstack features (qnn_debug_testkit.vl_inputs)
    image: Path | None = None
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    seed: int = 0
    layers_per_block: int = Field(default=1, ge=1, le=64)
    soc_model: int = 69
    htp_arch: int | None = None
    options: dict[str, str] = Field(default_factory=dict)
    # Every op of the first failing block runs alone on reference inputs (one session) and names the first
    # failing op. ``inner`` adds a second opinion on the cut-out block: "diagnose" (baseline → dump → compare,
    # refusing a lying dump by itself) or "bisect"; "none" skips it.
    inner: Literal["diagnose", "bisect", "none"] = "none"
    # A target with one_session (htp-sim): every block side by side in one session. Others (device/host): each
    # block converted to .mnn and run through the dump path (MNN2QNNModel --dump_intermediate_outputs on a
    # phone), one diagnose a block.
    target: str = DEFAULT_TARGET
    force: bool = False
    timeout: float = 1800.0
    # Peak bytes per process a one-session target (the simulator) keeps: blocks are grouped into sessions within
    # it; one block that cannot fit is a MemoryBudgetError. None: sized from the machine's free memory.
    max_memory: int | None = None
    # How the simulator's block groups run (qnn_debug.parallel): at most ``workers`` at once on this machine (None:
    # every core when the blocks hold enough weights to pay for the engine's start-up, else one after another), or
    # on the Ray cluster at ``cluster``.
    workers: int | None = Field(default=None, ge=1, le=1024)
    cluster: str | None = None


@dataclass
class BlockCut:
    """The blocks of target and reference with the CPU reference value of every tensor at their boundaries."""

    target: Any
    reference: Any
    ref_blocks: list[Block]
    tgt_blocks: list[Block]
    plan: list[Any]
    values: dict[str, Any]
    types: dict[str, int]
    shapes: dict[str, tuple[list[int], int]]
    outs_per_block: list[list[str]]
    fp16_range: RangeFinding | None
    reference_s: float


def cut_blocks(request: BlockRequest) -> BlockCut:
    """Cut both models into blocks of ``layers_per_block`` layers and run the reference once on ORT CPU fp32."""
    from ..inputs import prepare_inputs
    from ..onnx_graph import ensure_node_names, graph_inputs, load_onnx, tensor_elem_types
    from ..targets.onnx_capture import capture_plan, run_on_cpu

    target = ensure_node_names(load_onnx(request.model))
    reference = ensure_node_names(load_onnx(request.reference_model or request.model))
    layers = sorted(decoder_layers(reference))
    if not layers:
        raise BadInputError("the model has no decoder layers: no layer index in its node names (/layers.N/ or "
                            "/blocks.N/) and no repeated attention between residual adds",
                            hint="block localisation needs an LLM export; use `qnn-debug bisect` for other models")
    prepared = prepare_inputs(graph_inputs(reference), inputs=request.inputs, shapes=request.shapes or None,
                              seed=request.seed)
    feeds = prepared.arrays
    spans = [(layers[i], layers[min(i + request.layers_per_block, len(layers)) - 1])
             for i in range(0, len(layers), request.layers_per_block)]
    ref_blocks = [block(reference, a, b) for a, b in spans]
    tgt_blocks = [block(target, a, b) for a, b in spans]
    t0 = time.monotonic()
    plan = capture_plan(reference)
    wanted = {n for blk in [*ref_blocks, *tgt_blocks] for n in [*blk.inputs, *blk.outputs]}
    names = list(dict.fromkeys([p.name for p in plan if p.kind != "input"] + [n for n in wanted if n not in feeds]))
    values = {**run_on_cpu(reference, feeds, names), **feeds}
    rng = first_out_of_range((p.name, p.op, p.op_type, p.position, values[p.name]) for p in plan
                             if p.kind != "input" and p.name in values and np.asarray(values[p.name]).dtype.kind == "f")
    types = tensor_elem_types(reference)
    shapes = {n: (list(np.asarray(v).shape), elem_type(v, types.get(n))) for n, v in values.items()}
    target_made = {o for n in target.graph.node for o in n.output}
    outs_per_block = [[o for o in rb.outputs if o in target_made] for rb in ref_blocks]
    return BlockCut(target, reference, ref_blocks, tgt_blocks, plan, values, types, shapes, outs_per_block, rng,
                    round(time.monotonic() - t0, 3))


def save_block(work: Path, stem: str, target: Any, reference: Any, tb: Block, rb: Block, outs: list[str],
                shapes: dict[str, tuple[list[int], int]], values: dict[str, Any]) -> None:
    """The failing block as standalone graphs (target and reference) with its reference inputs, for ``inner``."""
    import onnx

    from ..inputs import save_npz

    onnx.save(block_model(target, Block(tb.first, tb.last, tb.positions, tb.inputs, outs), shapes),
              str(work / f"{stem}.onnx"))
    onnx.save(block_model(reference, Block(rb.first, rb.last, rb.positions, rb.inputs, outs), shapes),
              str(work / f"{stem}_reference.onnx"))
    save_npz(work / f"{stem}_inputs.npz", {n: np.asarray(values[n]) for n in tb.inputs})
    save_npz(work / f"{stem}_reference_inputs.npz", {n: np.asarray(values[n]) for n in rb.inputs})


def elem_type(value: Any, known: int | None) -> int:
    from onnx import helper

    return known or int(helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype))


def block_name(check: BlockCheck) -> str:
    if check.label:
        return check.label
    return f"layer {check.first}" if check.first == check.last else f"layers {check.first}..{check.last}"


def graph_kind(model: Any) -> str:
    """Which graph of an export this is, from its inputs: a VL vision encoder (``patches``, 2-row position ids),
    an M-RoPE decoder (3-row position ids), a decoder, or some other layered model."""
    dims = {i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}
    pos = dims.get("position_ids") or []
    if "patches" in dims:
        return "vision encoder"
    if "deepstack_embeds" in dims or (len(pos) == 2 and pos[0] == 3):
        return "decoder (M-RoPE)"
    if "input_ids" in dims or "inputs_embeds" in dims:
        return "decoder"
    return "layered model"


def explain(result: BlockResult, th: Thresholds) -> None:
    bad, ff = result.first_failing_block, result.first_failing
    n = len(result.blocks)
    graph = f"{result.graph}: " if result.graph != "decoder" else ""
    if bad is not None and bad.missing and ff is not None:
        result.summary = (f"{graph}{block_name(bad)} is the first failing segment of {n}: {ff.op} ({ff.op_type}) is "
                          f"{ff.method}")
    elif bad is not None:
        w = bad.worst
        where = block_name(bad)
        result.summary = (f"{graph}{where} is the first failing segment of {n}: fed the reference values of what it "
                          f"reads, its output {w.name if w else '?'!r} is {w.excess_db if w else '?'} dB beyond its fp16 "
                          f"floor (target {w.target_sqnr_db if w else '?'} dB, floor {w.floor_sqnr_db if w else '?'} dB)")
        if result.block_finding and result.block_pattern not in (None, "none"):
            result.summary += f"; the segment's diagnosis: {result.block_finding}"
        if ff is not None:
            result.summary += f"; inside it, {ff.op} ({ff.op_type}) is the first failing op"
            if ff.op_type:
                result.next_steps = [step("lookup_op_constraints", ["op", ff.op_type],
                                          f"Check {ff.op_type}'s QNN/HTP constraints and known MNN traps: {ff.op} is "
                                          f"the first failing op inside {ff.block} ({ff.method}).")]
    else:
        result.summary = f"{graph}every one of the {n} segments is within {th.jump_db:g} dB of its fp16 floor"
    if result.fp16_range is not None:
        result.summary += f"; fp16 range: {result.fp16_range.note}"
        if bad is None:
            result.verdict = "precision"
            rng = result.fp16_range
            if rng.op_type:
                result.next_steps = [step("lookup_op_constraints", ["op", rng.op_type],
                                          f"Check {rng.op_type}'s QNN/HTP constraints: {rng.op or rng.tensor!r} is "
                                          f"the first op leaving the fp16 range ({rng.note}).")]
