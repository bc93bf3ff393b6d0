"""Block localisation: run each decoder block alone, fed the CPU reference's hidden state, then diagnose one.

Why it is fast and sound: a block fed the *reference* values of everything it reads (hidden state,
rotary cos/sin, attention mask) can only go wrong through its own ops, so every block is judged on its
own — no error inherited from upstream, and each session is a fraction of the model. The first bad block
(its outputs beyond the fp16 floor by the jump gate; the floor is the block's own fp16 floor on the same
inputs) then gets the ordinary baseline → dump → compare (``diagnose``, which itself refuses a dump that
lies), and its first failing op is the model's.

On a target that runs blocks in one session (the simulator) the work streams (:mod:`.streamed`): one block,
or one group of blocks within the memory budget (``max_memory``), is in memory and in a session at a time,
so LLM-size exports fit.

The prefill shape is fixed by the inputs (``chunk_size`` tokens: ``input_ids`` ``[chunk, 1, hidden]``).
On a phone the same block ``.onnx`` files can be converted and dumped with MNN2QNNModel
``--dump_intermediate_outputs`` (``qnn-debug diagnose`` on the block with ``--target device``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..compare.thresholds import Thresholds
from ..progress import NULL_PROGRESS, Progress
from ..runstore import atomic_write_text, check_output_dir
from ..targets import target as get_target
from .block_cut import RESULT_FILE, BlockCut, BlockRequest, block_name, cut_blocks, explain, graph_kind
from .blocks_mnn import run_blocks_mnn
from .models import BlockCheck, BlockFirstFailing, BlockResult
from .probe import ProbeTensor

__all__ = ["RESULT_FILE", "BlockCut", "BlockRequest", "cut_blocks", "run_blocks"]


def run_blocks(request: BlockRequest, progress: Progress = NULL_PROGRESS,
               thresholds: Thresholds | None = None) -> BlockResult:
    """Localise the first failing decoder block of ``request.model``, then its first failing op."""

    started = time.monotonic()
    th = thresholds or Thresholds()
    tgt = get_target(request.target)
    out = _prepare_out(Path(request.out), request.force)
    if not tgt.capabilities.one_session:  # each block through the target's own dump
        return run_blocks_mnn(request, out, progress, th, started)
    from .block_jobs import simulate
    from .streamed import save_block

    work = out / "blocks"
    work.mkdir(exist_ok=True)
    cut, response, timings = simulate(request, work, progress, th, tgt)
    rng = cut.fp16_range
    judged = dict(zip(cut.sent, response["blocks"], strict=True))
    skipped = {cut.sent[int(i)]: why for i, why in (response.get("not_judged") or {}).items()}
    checks = []
    for k, (tb, rb, outs) in enumerate(zip(cut.tgt_blocks, cut.ref_blocks, cut.outs_per_block, strict=True)):
        found = [ProbeTensor.model_validate(t) for t in judged.get(k, [])]
        scored = [t for t in found if t.excess_db is not None]
        worst = max(scored, key=lambda t: t.excess_db or 0.0) if scored else None
        missing = cut.missing[k] if k < len(cut.missing) else []
        checks.append(BlockCheck(first=rb.first, last=rb.last, label=rb.label, inputs=tb.inputs, outputs=outs,
                                 bad=any(t.status == "bad" for t in found) or bool(missing), worst=worst,
                                 missing=missing, not_judged=skipped.get(k, "")))
    result = BlockResult(out=str(out), model=str(request.model), graph=graph_kind(cut.reference.model),
                         blocks=checks, verdict="ok", summary="", fp16_range=rng, timings=timings,
                         warnings=[*cut.notes, *(response.get("lowered") or [])])
    bad = next((c for c in checks if c.bad), None)
    result.first_failing_block = bad
    if bad is not None:
        result.verdict = "real_bug"
        k = checks.index(bad)
        where = block_name(bad)
        if bad.missing:
            result.first_failing = missing_op(cut, k, where)
        elif cut.sent.index(k) == response.get("first_bad_block"):
            stage = response.get("ops_stage")
            for piece, tensors in zip((stage or {}).get("pieces", []), response.get("ops") or [], strict=False):
                hit = next((ProbeTensor.model_validate(t) for t in tensors if t["status"] == "bad"), None)
                if hit is not None:
                    result.first_failing = BlockFirstFailing(op=piece["op"], op_type=piece["op_type"], tensor=hit.name,
                                                             position=piece["position"], block=where, evidence=hit)
                    break
        if request.inner != "none" and not bad.missing:
            t0 = time.monotonic()
            stem = f"block{k:03d}_{_slug(bad)}"
            save_block(cut, work, stem, k)
            (_diagnose_block if request.inner == "diagnose" else _bisect_block)(result, work, stem, request, progress)
            result.timings[f"{request.inner}_block_s"] = round(time.monotonic() - t0, 3)
    explain(result, th)
    result.elapsed_s = round(time.monotonic() - started, 3)
    atomic_write_text(out / RESULT_FILE, result.model_dump_json(indent=1))
    return result



def _diagnose_block(result: BlockResult, work: Path, stem: str, request: BlockRequest, progress: Progress) -> None:
    """baseline → dump → compare on the failing block (diagnose falls back by itself if its dump lies)."""
    from ..diagnose import diagnose

    d = diagnose(work / f"{stem}.onnx", work.parent / f"diagnose-{stem}", inputs=work / f"{stem}_inputs.npz",
                 reference_model=work / f"{stem}_reference.onnx", target=request.target, soc_model=request.soc_model,
                 htp_arch=request.htp_arch, target_options=request.options or None, mnn_gate=False,
                 timeout=request.timeout, force=request.force, progress=progress)
    result.block_diagnosis = d.out
    result.timings.update({f"diagnose_{k}": v for k, v in d.timings.items()})
    assert result.first_failing_block is not None
    name = block_name(result.first_failing_block)
    if d.compare is not None:
        result.block_verdict = d.compare.verdict.kind
        result.block_pattern = d.compare.verdict.pattern
        from ..compare.trust import verdict_alone

        # the block's reference is the CPU reference's own values at its boundary: the MNN gate is off on purpose
        result.block_finding = verdict_alone(d.compare)
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


def _slug(check: BlockCheck) -> str:
    if check.label:
        return "outside_" + ("before" if "before" in check.label else "after") + f"{check.first}"
    return f"layers{check.first}-{check.last}"


def missing_op(cut: Any, k: int, where: str) -> BlockFirstFailing:
    """A segment whose result the target never computes (an op dropped from the target graph): the reference op
    making the first missing tensor, and what the target's next block reads in its place."""
    from ..onnx_graph import nodes_in_order

    name = cut.missing[k][0]
    node = next(n for n in nodes_in_order(cut.reference.model) if name in n.outputs)
    instead = ""
    if k + 1 < len(cut.tgt_blocks):
        ref_in, tgt_in = cut.ref_blocks[k + 1].inputs, cut.tgt_blocks[k + 1].inputs
        extra = [i for i in tgt_in if i not in ref_in]
        if name in ref_in and extra:
            instead = f"; the target's {cut.tgt_blocks[k + 1].name} reads {extra[0]!r} in its place"
    return BlockFirstFailing(op=node.name, op_type=node.op_type, tensor=name, position=node.position, block=where,
                             method=f"missing in the target: the reference computes {name!r} here, the target "
                                    f"graph has no op making it{instead}")


def _prepare_out(out: Path, force: bool) -> Path:
    import shutil

    def ours(p: Path) -> bool:
        return (p / RESULT_FILE).exists() or (p / "blocks").is_dir()

    # an attempt that stopped before its result (bad input found late, a budget error) is replaced without --force
    unfinished = out.is_dir() and (out / "blocks").is_dir() and not (out / RESULT_FILE).exists()
    if check_output_dir(out, force=force or unfinished, is_ours=ours, what="block localisation"):
        for entry in out.iterdir():
            if entry.name in (RESULT_FILE, "blocks", "vl_inputs.npz") or entry.name.startswith(("diagnose-block", "bisect-block")):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()
