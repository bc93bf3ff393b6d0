"""Block localisation: run each decoder block alone, fed the CPU reference's hidden state, then diagnose one.

Why it is fast and sound: a block fed the *reference* values of everything it reads (hidden state,
rotary cos/sin, attention mask) can only go wrong through its own ops, so every block is judged on its
own — no error inherited from upstream, and each session is a fraction of the model. The first bad block
(its outputs beyond the fp16 floor by the jump gate; the floor is the block's own fp16 floor on the same
inputs) then gets the ordinary baseline → dump → compare (``diagnose``, which itself refuses a dump that
lies), and its first failing op is the model's.

On the simulator the work streams (:mod:`.streamed`): one block, or one group of blocks within the memory
budget (``max_memory``), is in memory and in a simulator session at a time, so LLM-size exports fit.

The prefill shape is fixed by the inputs (``chunk_size`` tokens: ``input_ids`` ``[chunk, 1, hidden]``).
On a phone the same block ``.onnx`` files can be converted and dumped with MNN2QNNModel
``--dump_intermediate_outputs`` (``qnn-debug diagnose`` on the block with ``--target device``).
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
from ..progress import NULL_PROGRESS, Progress
from ..runstore import atomic_write_text, check_output_dir
from .bisect import RangeFinding, first_out_of_range
from .cut import Block, block, block_model, decoder_layers
from .models import BlockCheck, BlockFirstFailing, BlockResult
from .probe import ProbeTensor

RESULT_FILE = "blocks.json"
WORKER = "qnn_debug.workers.sim_probe_worker"


class BlockRequest(BaseModel):
    model: Path  # what the target runs (.onnx); ``reference_model`` (default: the same) feeds the reference
    out: Path
    reference_model: Path | None = None
    inputs: Path | None = None  # the prefill inputs (.npz); default: seeded data of the model's static shapes
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
    # htp-sim: every block side by side in one simulator session. device/host: each block converted to .mnn
    # and run through the dump path (MNN2QNNModel --dump_intermediate_outputs on a phone), one diagnose a block.
    target: Literal["htp-sim", "device", "host"] = "htp-sim"
    force: bool = False
    timeout: float = 1800.0
    # Peak bytes per process the simulator path keeps (blocks are grouped into sessions within it; one block
    # that cannot fit is a MemoryBudgetError). None: sized from the machine's free memory.
    max_memory: int | None = None


def run_blocks(request: BlockRequest, progress: Progress = NULL_PROGRESS,
               thresholds: Thresholds | None = None) -> BlockResult:
    """Localise the first failing decoder block of ``request.model``, then its first failing op."""

    started = time.monotonic()
    th = thresholds or Thresholds()
    out = _prepare_out(Path(request.out), request.force)
    if request.target != "htp-sim":
        from .blocks_mnn import run_blocks_mnn

        return run_blocks_mnn(request, out, progress, th, started)
    from .streamed import save_block, simulate

    work = out / "blocks"
    work.mkdir(exist_ok=True)
    cut, response, timings = simulate(request, work, progress, th)
    tgt_blocks, outs_per_block, rng = cut.tgt_blocks, cut.outs_per_block, cut.fp16_range
    checks = []
    for tb, outs, tensors in zip(tgt_blocks, outs_per_block, response["blocks"], strict=True):
        found = [ProbeTensor.model_validate(t) for t in tensors]
        scored = [t for t in found if t.excess_db is not None]
        worst = max(scored, key=lambda t: t.excess_db or 0.0) if scored else None
        checks.append(BlockCheck(first=tb.first, last=tb.last, inputs=tb.inputs, outputs=outs,
                                 bad=any(t.status == "bad" for t in found), worst=worst))
    result = BlockResult(out=str(out), model=str(request.model), blocks=checks, verdict="ok", summary="",
                         fp16_range=rng, timings=timings)
    bad = next((c for c in checks if c.bad), None)
    result.first_failing_block = bad
    if bad is not None:
        result.verdict = "real_bug"
        k = checks.index(bad)
        stage = response.get("ops_stage")
        where = f"layer {bad.first}" if bad.first == bad.last else f"layers {bad.first}..{bad.last}"
        for piece, tensors in zip((stage or {}).get("pieces", []), response.get("ops") or [], strict=False):
            hit = next((ProbeTensor.model_validate(t) for t in tensors if t["status"] == "bad"), None)
            if hit is not None:
                result.first_failing = BlockFirstFailing(op=piece["op"], op_type=piece["op_type"], tensor=hit.name,
                                                         position=piece["position"], block=where, evidence=hit)
                break
        if request.inner != "none":
            t0 = time.monotonic()
            stem = f"block{k:03d}_layers{bad.first}-{bad.last}"
            save_block(cut, work, stem, k)
            (_diagnose_block if request.inner == "diagnose" else _bisect_block)(result, work, stem, request, progress)
            timings[f"{request.inner}_block_s"] = round(time.monotonic() - t0, 3)
    _explain(result, th)
    result.elapsed_s = round(time.monotonic() - started, 3)
    atomic_write_text(out / RESULT_FILE, result.model_dump_json(indent=1))
    return result



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
        raise BadInputError("the model's node names carry no decoder layer index (/layers.N/ or /blocks.N/)",
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
    shapes = {n: (list(np.asarray(v).shape), _elem(v, types.get(n))) for n, v in values.items()}
    target_made = {o for n in target.graph.node for o in n.output}
    outs_per_block = [[o for o in rb.outputs if o in target_made] for rb in ref_blocks]
    return BlockCut(target, reference, ref_blocks, tgt_blocks, plan, values, types, shapes, outs_per_block, rng,
                    round(time.monotonic() - t0, 3))


def _save_block(work: Path, stem: str, target: Any, reference: Any, tb: Block, rb: Block, outs: list[str],
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


def _elem(value: Any, known: int | None) -> int:
    from onnx import helper

    return known or int(helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype))


def _diagnose_block(result: BlockResult, work: Path, stem: str, request: BlockRequest, progress: Progress) -> None:
    """baseline → dump → compare on the failing block (diagnose falls back by itself if its dump lies)."""
    from ..diagnose import diagnose

    d = diagnose(work / f"{stem}.onnx", work.parent / f"diagnose-{stem}", inputs=work / f"{stem}_inputs.npz",
                 reference_model=work / f"{stem}_reference.onnx", soc_model=request.soc_model,
                 htp_arch=request.htp_arch, target_options=request.options or None, mnn_gate=False,
                 timeout=request.timeout, force=request.force, progress=progress)
    result.block_diagnosis = d.out
    assert result.first_failing_block is not None
    name = (f"layer {result.first_failing_block.first}" if result.first_failing_block.first == result.first_failing_block.last
            else f"layers {result.first_failing_block.first}..{result.first_failing_block.last}")
    if d.compare is not None:
        result.block_verdict = d.compare.verdict.kind
        ff = d.compare.first_failing
        if ff is not None:
            result.first_failing = BlockFirstFailing(op=ff.op, op_type=ff.op_type, tensor=ff.tensor,
                                                     position=ff.position, block=name)
    elif d.fallback is not None and d.fallback.bisect is not None:
        b = d.fallback.bisect
        result.block_verdict = b.verdict
        if b.first_failing is not None:
            result.first_failing = BlockFirstFailing(op=b.first_failing.op, op_type=b.first_failing.op_type,
                                                     tensor=b.first_failing.tensor or "", position=b.first_failing.position,
                                                     block=name)


def _bisect_block(result: BlockResult, work: Path, stem: str, request: BlockRequest, progress: Progress) -> None:
    """Bisection inside the failing block (unmarked truncated blocks, no dump)."""
    from .bisect import BisectRequest, run_bisect

    b = run_bisect(BisectRequest(model=work / f"{stem}.onnx", reference_model=work / f"{stem}_reference.onnx",
                                 inputs=work / f"{stem}_reference_inputs.npz", out=work.parent / f"bisect-{stem}",
                                 soc_model=request.soc_model, htp_arch=request.htp_arch, options=request.options,
                                 mnn_gate=False, force=request.force, timeout=request.timeout), progress)
    result.block_diagnosis, result.block_verdict = b.out, b.verdict
    bad = result.first_failing_block
    assert bad is not None
    if b.first_failing is not None:
        result.first_failing = BlockFirstFailing(op=b.first_failing.op, op_type=b.first_failing.op_type,
                                                 tensor=b.first_failing.tensor or "", position=b.first_failing.position,
                                                 block=f"layer {bad.first}" if bad.first == bad.last
                                                 else f"layers {bad.first}..{bad.last}")


def _explain(result: BlockResult, th: Thresholds) -> None:
    bad, ff = result.first_failing_block, result.first_failing
    n = len(result.blocks)
    if bad is not None:
        w = bad.worst
        where = f"layer {bad.first}" if bad.first == bad.last else f"layers {bad.first}..{bad.last}"
        result.summary = (f"{where} is the first failing block of {n}: fed the reference hidden state, its output "
                          f"{w.name if w else '?'!r} is {w.excess_db if w else '?'} dB beyond its fp16 floor "
                          f"(target {w.target_sqnr_db if w else '?'} dB, floor {w.floor_sqnr_db if w else '?'} dB)")
        if ff is not None:
            result.summary += f"; inside it, {ff.op} ({ff.op_type}) is the first failing op"
            if ff.op_type:
                result.next_steps = [step("lookup_op_constraints", ["op", ff.op_type],
                                          f"Check {ff.op_type}'s QNN/HTP constraints and known MNN traps: {ff.op} is "
                                          f"the first failing op inside {ff.block} ({ff.method}).")]
    else:
        result.summary = f"every one of the {n} blocks is within {th.jump_db:g} dB of its fp16 floor"
    if result.fp16_range is not None:
        result.summary += f"; fp16 range: {result.fp16_range.note}"
        if bad is None:
            result.verdict = "precision"
            rng = result.fp16_range
            if rng.op_type:
                result.next_steps = [step("lookup_op_constraints", ["op", rng.op_type],
                                          f"Check {rng.op_type}'s QNN/HTP constraints: {rng.op or rng.tensor!r} is "
                                          f"the first op leaving the fp16 range ({rng.note}).")]


def _prepare_out(out: Path, force: bool) -> Path:
    import shutil

    def ours(p: Path) -> bool:
        return (p / RESULT_FILE).exists() or (p / "blocks").is_dir()

    if check_output_dir(out, force=force, is_ours=ours, what="block localisation"):
        for entry in out.iterdir():
            if entry.name in (RESULT_FILE, "blocks") or entry.name.startswith(("diagnose-block", "bisect-block")):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()
