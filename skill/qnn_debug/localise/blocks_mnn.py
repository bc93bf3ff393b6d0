"""Block localisation on MNN targets (``device``: a phone over adb; ``host``: a local MNN build).

Each decoder block is cut out as in :mod:`.blocks`, converted to ``.mnn`` with the MNN wheel's converter
(in a worker: importing MNN writes to fd 1), and run through the ordinary ``diagnose`` path on its own:
the CPU fp32 baseline of the *reference* block, the target's all-tensor dump of the block (on a phone:
MNN2QNNModel ``--dump_intermediate_outputs`` on the block's ``.mnn``, then ModuleBasic), and ``compare``.
Every block is fed the reference hidden state (and rotary tables, mask) at its input, so its error is
its own. The first block whose outputs are beyond their fp16 floor is the failing block, and that
block's comparison names the first failing op inside it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ..compare.schema import CompareResult, TensorRow
from ..compare.thresholds import Thresholds
from ..errors import TargetError
from ..progress import Progress
from ..runstore import atomic_write_text
from .block_cut import RESULT_FILE, BlockRequest, block_name, cut_blocks, explain, save_block
from .models import BlockCheck, BlockFirstFailing, BlockResult
from .probe import ProbeTensor

CONVERT_WORKER = "qnn_debug.workers.mnn_convert_worker"


def run_blocks_mnn(request: BlockRequest, out: Path, progress: Progress, th: Thresholds,
                   started: float) -> BlockResult:
    """Diagnose every block alone on ``request.target``; the first bad block's first failing op is the model's."""
    cut = cut_blocks(request)
    timings: dict[str, float] = {"reference_s": cut.reference_s}
    work = out / "blocks"
    work.mkdir(exist_ok=True)
    checks: list[BlockCheck] = []
    diagnoses: list[tuple[str, CompareResult | None, str | None]] = []
    for k, (tb, rb, outs) in enumerate(zip(cut.tgt_blocks, cut.ref_blocks, cut.outs_per_block, strict=True)):
        t0 = time.monotonic()
        stem = f"block{k:03d}_layers{tb.first}-{tb.last}"
        with progress.stage(f"blocks: {tb.name}", total=None, message=f"blocks: {tb.name} on the {request.target}"):
            save_block(work, stem, cut.target, cut.reference, tb, rb, outs, cut.shapes, cut.values)
            renamed = _file_safe_boundary(work, stem)
            compare, diag_out, method = _diagnose_block(work, stem, request, progress)
        back = {new: old for old, new in renamed.items()}
        if compare is not None:
            for row in compare.tensors:
                row.name = back.get(row.name, row.name)
            if compare.first_failing is not None:
                compare.first_failing.tensor = back.get(compare.first_failing.tensor, compare.first_failing.tensor)
        rows = [r for r in (compare.tensors if compare is not None else []) if r.name in outs]
        found = [_probe_tensor(r) for r in rows]
        scored = [t for t in found if t.excess_db is not None]
        worst = max(scored, key=lambda t: t.excess_db or 0.0) if scored else None
        if rows:
            bad = any(t.status == "bad" for t in found)
        else:  # no block output could be aligned: the comparison's own verdict is all there is
            bad = compare is not None and compare.verdict.kind == "real_bug"
        checks.append(BlockCheck(first=tb.first, last=tb.last, inputs=tb.inputs, outputs=outs, bad=bad, worst=worst,
                                 seconds=round(time.monotonic() - t0, 3)))
        diagnoses.append((diag_out, compare, method))
        timings[f"block{k:03d}_s"] = checks[-1].seconds
    result = BlockResult(out=str(out), model=str(request.model), blocks=checks, verdict="ok", summary="",
                         fp16_range=cut.fp16_range, timings=timings)
    bad_check = next((c for c in checks if c.bad), None)
    result.first_failing_block = bad_check
    if bad_check is not None:
        result.verdict = "real_bug"
        diag_out, compare, method = diagnoses[checks.index(bad_check)]
        result.block_diagnosis = diag_out
        if compare is not None:
            result.block_verdict = compare.verdict.kind
            ff = compare.first_failing
            if ff is not None:
                result.first_failing = BlockFirstFailing(
                    op=ff.model_op or ff.op, op_type=ff.model_op_type or ff.op_type, tensor=ff.tensor,
                    position=ff.position, block=block_name(bad_check),
                    method=f"{method or 'full dump'} of the block on the {request.target}")
    explain(result, th)
    result.elapsed_s = round(time.monotonic() - started, 3)
    atomic_write_text(out / RESULT_FILE, result.model_dump_json(indent=1))
    return result


def file_safe(name: str, taken: set[str]) -> str:
    """``name`` as a ModuleBasic test-dir file name (its inputs and outputs are ``<dir>/<name>.txt``)."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip("._") or "t"
    new, k = base, 1
    while new in taken:
        new, k = f"{base}_{k}", k + 1
    taken.add(new)
    return new


def _file_safe_boundary(work: Path, stem: str) -> dict[str, str]:
    """Rename the block's graph inputs and outputs (both graphs, both input files) to file-safe names.

    Why: a block's boundary tensors are the export's inner tensors (``/layers.0/Add_1_output_0``), and the
    device path passes graph inputs and outputs through a ModuleBasic test dir, one file per tensor."""
    import numpy as np
    import onnx

    from ..inputs import save_npz

    models = {p: onnx.load(str(work / p)) for p in (f"{stem}.onnx", f"{stem}_reference.onnx")}
    boundary = list(dict.fromkeys(v.name for m in models.values() for v in [*m.graph.input, *m.graph.output]))
    taken: set[str] = set()
    rename = {}
    for name in boundary:
        new = file_safe(name, taken)
        if new != name:
            rename[name] = new
    if not rename:
        return rename
    for path, m in models.items():
        for node in m.graph.node:
            for i, n in enumerate(node.input):
                node.input[i] = rename.get(n, n)
            for i, n in enumerate(node.output):
                node.output[i] = rename.get(n, n)
        for v in [*m.graph.input, *m.graph.output]:
            v.name = rename.get(v.name, v.name)
        onnx.save(m, str(work / path))
    for npz in (f"{stem}_inputs.npz", f"{stem}_reference_inputs.npz"):
        with np.load(work / npz, allow_pickle=False) as z:
            arrays = {rename.get(k, k): z[k] for k in z.files}
        save_npz(work / npz, arrays)
    return rename


def _diagnose_block(work: Path, stem: str, request: BlockRequest,
                    progress: Progress) -> tuple[CompareResult | None, str, str | None]:
    """Convert the block to .mnn and run baseline (reference block) → target dump (block .mnn) → compare."""
    from ..diagnose import diagnose
    from ..workers import run_worker

    mnn = work / f"{stem}.mnn"
    run_worker(CONVERT_WORKER, {"src": str(work / f"{stem}.onnx"), "dst": str(mnn)},
               log_path=work / f"convert_{stem}.log", timeout=request.timeout, progress=progress, what="MNN converter")
    d = diagnose(mnn, work.parent / f"diagnose-{stem}", inputs=work / f"{stem}_inputs.npz",
                 reference_model=work / f"{stem}_reference.onnx", target=request.target, soc_model=request.soc_model,
                 htp_arch=request.htp_arch, target_options=request.options or None, mnn_gate=False,
                 timeout=request.timeout, force=request.force, progress=progress)
    if d.compare is None:
        raise TargetError(f"the {request.target} run of {stem} gave no comparison",
                          hint=f"see {d.out}")
    return d.compare, d.out, None if d.method == "full_dump" else d.method


def _probe_tensor(row: TensorRow) -> ProbeTensor:
    """A comparison row in the block check's terms (target and floor SQNR, excess, status)."""
    metrics: Any = row.metrics or {}
    floor: Any = row.floor_metrics or {}
    return ProbeTensor(name=row.name, target_sqnr_db=metrics.get("sqnr_db"), floor_sqnr_db=floor.get("sqnr_db"),
                       excess_db=row.excess_db, status=row.status)
