"""Block localisation: run each decoder block alone, fed the CPU reference's hidden state, then diagnose one.

Why it is fast and sound: a block fed the *reference* values of everything it reads (hidden state,
rotary cos/sin, attention mask) can only go wrong through its own ops, so every block is judged on its
own — no error inherited from upstream, and each session is a fraction of the model. The first bad block
(its outputs beyond the fp16 floor by the jump gate; the floor is the block's own fp16 floor on the same
inputs) then gets the ordinary baseline → dump → compare (``diagnose``, which itself refuses a dump that
lies), and its first failing op is the model's.

The prefill shape is fixed by the inputs (``chunk_size`` tokens: ``input_ids`` ``[chunk, 1, hidden]``).
On a phone the same block ``.onnx`` files can be converted and dumped with MNN2QNNModel
``--dump_intermediate_outputs`` (``qnn-debug diagnose`` on the block with ``--target device``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ..compare.thresholds import Thresholds
from ..progress import NULL_PROGRESS, Progress
from ..runstore import atomic_write_text, check_output_dir
from ..targets import target as get_target
from ..targets.base import ProbeSetup
from .block_cut import (
    RESULT_FILE,
    BlockCut,
    BlockRequest,
    block_name,
    cut_blocks,
    elem_type,
    explain,
    save_block,
)
from .blocks_mnn import run_blocks_mnn
from .models import BlockCheck, BlockFirstFailing, BlockResult
from .probe import ProbeTensor
from .side_by_side import Feeders, side_by_side

__all__ = ["RESULT_FILE", "BlockCut", "BlockRequest", "cut_blocks", "ops_stage", "run_blocks"]


def run_blocks(request: BlockRequest, progress: Progress = NULL_PROGRESS,
               thresholds: Thresholds | None = None) -> BlockResult:
    """Localise the first failing decoder block of ``request.model``, then its first failing op."""

    from ..onnx_graph import tensor_elem_types

    started = time.monotonic()
    th = thresholds or Thresholds()
    tgt = get_target(request.target)
    out = _prepare_out(Path(request.out), request.force)
    if not tgt.capabilities.one_session:  # each block through the target's own dump
        return run_blocks_mnn(request, out, progress, th, started)
    cut = cut_blocks(request)
    target, reference, ref_blocks, tgt_blocks = cut.target, cut.reference, cut.ref_blocks, cut.tgt_blocks
    plan, values, types, shapes, outs_per_block = cut.plan, cut.values, cut.types, cut.shapes, cut.outs_per_block
    rng = cut.fp16_range
    timings: dict[str, float] = {"reference_s": cut.reference_s}

    t0 = time.monotonic()
    work = out / "blocks"
    work.mkdir(exist_ok=True)
    op_types = {o: n.op_type for n in reference.graph.node for o in n.output}
    all_types = {**tensor_elem_types(target), **types}
    blocks_stage = _stage(work, "blocks", target, reference, [tb.positions for tb in tgt_blocks],
                          [rb.positions for rb in ref_blocks], outs_per_block, shapes, values, op_types, all_types)
    judged = sorted(p.name for p in plan if p.kind != "input")
    keys = {n: f"v{i}" for i, n in enumerate(values)}
    np.savez(work / "reference_values.npz", **{keys[n]: np.asarray(v) for n, v in values.items()})  # type: ignore[arg-type]
    ops_job = {"work": str(work), "target": str(Path(request.model).resolve()),
               "reference": str(Path(request.reference_model or request.model).resolve()),
               "values": str(work / "reference_values.npz"), "keys": keys, "types": all_types, "judged": judged,
               "blocks": [tb.positions for tb in tgt_blocks]}
    timings["prepare_s"] = round(time.monotonic() - t0, 3)

    session = tgt.session_options(ProbeSetup(work=work, soc_model=request.soc_model, htp_arch=request.htp_arch,
                                             options=request.options, timeout=request.timeout, progress=progress))
    t0 = time.monotonic()
    response = tgt.run_session({"job": "blocks", "blocks": blocks_stage, "ops_job": ops_job, **session,
                                "thresholds": th.model_dump(mode="json")},
                               log=work / "htp_blocks_worker.log", timeout=request.timeout, progress=progress,
                               what="HTP simulator block runs")
    timings["htp_sim_s"] = round(time.monotonic() - t0, 3)
    timings.update({f"htp_sim_{k}": v for k, v in response.items() if k.endswith("_s")})
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
        where = block_name(bad)
        for piece, tensors in zip((stage or {}).get("pieces", []), response.get("ops") or [], strict=False):
            hit = next((ProbeTensor.model_validate(t) for t in tensors if t["status"] == "bad"), None)
            if hit is not None:
                result.first_failing = BlockFirstFailing(op=piece["op"], op_type=piece["op_type"], tensor=hit.name,
                                                         position=piece["position"], block=where, evidence=hit)
                break
        if request.inner != "none":
            t0 = time.monotonic()
            stem = f"block{k:03d}_layers{bad.first}-{bad.last}"
            save_block(work, stem, target, reference, tgt_blocks[k], ref_blocks[k], outs_per_block[k], shapes, values)
            (_diagnose_block if request.inner == "diagnose" else _bisect_block)(result, work, stem, request, progress)
            timings[f"{request.inner}_block_s"] = round(time.monotonic() - t0, 3)
    explain(result, th)
    result.elapsed_s = round(time.monotonic() - started, 3)
    atomic_write_text(out / RESULT_FILE, result.model_dump_json(indent=1))
    return result



def ops_stage(job: dict[str, Any], k: int) -> dict[str, Any] | None:
    """The side-by-side stage of every op of block ``k`` (built in the simulator worker, for the bad block only)."""
    import onnx

    from ..onnx_graph import ensure_node_names

    target = ensure_node_names(onnx.load(job["target"]))
    reference = ensure_node_names(onnx.load(job["reference"]))
    stored = np.load(job["values"], allow_pickle=False)
    values = {n: stored[key] for n, key in job["keys"].items()}
    types = {n: int(t) for n, t in job["types"].items()}
    shapes = {n: (list(v.shape), elem_type(v, types.get(n))) for n, v in values.items()}
    known, judged = set(values), set(job["judged"])
    op_types = {o: n.op_type for n in reference.graph.node for o in n.output}
    t_feeders, r_feeders = Feeders(target, known), Feeders(reference, known)
    ref_pos = {o: i for i, n in enumerate(reference.graph.node) for o in n.output}
    pieces, ref_pieces, piece_outs = [], [], []
    for pos in job["blocks"][k]:
        outs = [o for o in target.graph.node[pos].output if o in judged and o in ref_pos]
        if outs:
            pieces.append(t_feeders.piece(pos))
            ref_pieces.append(r_feeders.piece(ref_pos[outs[0]]))
            piece_outs.append(outs)
    if not pieces:
        return None
    return _stage(Path(job["work"]), f"ops{k:03d}", target, reference, pieces, ref_pieces, piece_outs, shapes, values,
                  op_types, types)


def _stage(work: Path, tag: str, target: Any, reference: Any, pieces: list[list[int]], ref_pieces: list[list[int]],
           outs: list[list[str]], shapes: dict[str, tuple[list[int], int]], values: dict[str, Any],
           op_types: dict[str, str], types: dict[str, int]) -> dict[str, Any]:
    """Write one side-by-side stage: the target's pieces, their feeds, and reference + floor values by new name."""
    import onnx

    from ..inputs import save_npz
    from ..onnx_graph import fp16_floor
    from ..targets.onnx_capture import run_on_cpu

    model, maps = side_by_side(target, pieces, outs, shapes, tag="p", types=types)
    ref_model, ref_maps = side_by_side(reference, ref_pieces, outs, shapes, tag="p", types=types)
    feeds = {i.name: np.asarray(values[i.name]) for i in model.graph.input}
    ref_feeds = {i.name: np.asarray(values[i.name]) for i in ref_model.graph.input}
    floor = run_on_cpu(fp16_floor(ref_model), ref_feeds, [o.name for o in ref_model.graph.output])
    reference_by_new, floor_by_new = {}, {}
    for mp, rmp in zip(maps, ref_maps, strict=True):
        for orig, new in mp.items():
            reference_by_new[new] = np.asarray(values[orig])
            if orig in rmp and rmp[orig] in floor:
                floor_by_new[new] = floor[rmp[orig]]
    onnx.save(model, str(work / f"{tag}.onnx"))
    save_npz(work / f"{tag}_feeds.npz", feeds)
    keys = {new: f"k{i}" for i, new in enumerate(reference_by_new)}  # tensor names are not safe zip member names
    np.savez(work / f"{tag}_reference.npz", **{keys[n]: v for n, v in reference_by_new.items()})  # type: ignore[arg-type]
    np.savez(work / f"{tag}_floor.npz", **{keys[n]: v for n, v in floor_by_new.items()})  # type: ignore[arg-type]
    nodes = target.graph.node
    return {"model": str(work / f"{tag}.onnx"), "feeds": str(work / f"{tag}_feeds.npz"),
            "reference": str(work / f"{tag}_reference.npz"), "floor": str(work / f"{tag}_floor.npz"), "keys": keys,
            "pieces": [{"outputs": mp, "op_types": {o: op_types.get(o) for o in mp},
                        "op": nodes[piece[-1]].name, "op_type": nodes[piece[-1]].op_type, "position": piece[-1]}
                       for mp, piece in zip(maps, pieces, strict=True)]}


def _diagnose_block(result: BlockResult, work: Path, stem: str, request: BlockRequest, progress: Progress) -> None:
    """baseline → dump → compare on the failing block (diagnose falls back by itself if its dump lies)."""
    from ..diagnose import diagnose

    d = diagnose(work / f"{stem}.onnx", work.parent / f"diagnose-{stem}", inputs=work / f"{stem}_inputs.npz",
                 reference_model=work / f"{stem}_reference.onnx", target=request.target, soc_model=request.soc_model,
                 htp_arch=request.htp_arch, target_options=request.options or None, mnn_gate=False,
                 timeout=request.timeout, force=request.force, progress=progress)
    result.block_diagnosis = d.out
    assert result.first_failing_block is not None
    name = block_name(result.first_failing_block)
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
                                 target=request.target,
                                 soc_model=request.soc_model, htp_arch=request.htp_arch, options=request.options,
                                 mnn_gate=False, force=request.force, timeout=request.timeout), progress)
    result.block_diagnosis, result.block_verdict = b.out, b.verdict
    bad = result.first_failing_block
    assert bad is not None
    if b.first_failing is not None:
        result.first_failing = BlockFirstFailing(op=b.first_failing.op, op_type=b.first_failing.op_type,
                                                 tensor=b.first_failing.tensor or "", position=b.first_failing.position,
                                                 block=block_name(bad))


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
