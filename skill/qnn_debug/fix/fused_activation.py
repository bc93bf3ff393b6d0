"""Fix for ``real_bug`` at a fused MNN op that loses its activation: keep the activation out of the fusion.

MNN's converter folds a Relu into the Convolution/Deconvolution before it (the op's ``relu`` flag); MNN's QNN
backend may then drop it. ``Max(x, 0)`` computes the same values (bit for bit in fp32) but is an elementwise
BinaryOp the converter does not fold, so the .mnn keeps it as a separate op that the backend translates on its
own. Proven here: the converted .mnn has the BinaryOp producing the activation's tensor, ONNX Runtime fp32 and
MNN CPU still match the reference. MNN's QNN translation of the separate op is proven only on MNN's own backend:
given a host MNN build (``host_options``: mnn_build_dir, qnn_lib_dir), the fixed model is diagnosed on it and the
first failing op must be gone; otherwise that is left to the phone and said so.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import fs
from ..compare.schema import CompareResult
from ..errors import BadInputError
from ..onnx_graph import ensure_node_names, graph_outputs, load_onnx
from ..progress import Progress
from ..runstore import INPUTS_FILE
from .models import FixResult, Numbers, ProofCheck
from .output import write_next_to
from .ship_mnn import ship_mnn
from .source import Source, numbers

SUFFIX = "relu-unfused"
ACTIVATIONS = {"Relu"}
MNN_CPU_LIMIT = 0.01  # ModuleBasic's and the baseline gate's relative threshold


def fused_activation(result: CompareResult) -> str | None:
    """The Relu node a fused target op covers at the first failing op, if the verdict is a bug there."""
    ff = result.first_failing
    if result.verdict.kind != "real_bug" or ff is None or ff.fused is None:
        return None
    for entry in ff.fused.model_nodes:
        m = re.fullmatch(r"(.+) \(([A-Za-z0-9_]+)\)", entry)
        if m and m.group(2) in ACTIVATIONS:
            return m.group(1)
    return None


def unfuse(model: onnx.ModelProto, relu: str) -> onnx.ModelProto:
    """A copy of ``model`` where Relu node ``relu`` is ``Max(x, 0)`` (same values, not foldable into a conv)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    names = {i.name for i in fixed.graph.initializer} | {o for n in fixed.graph.node for o in n.output}
    zero = f"{relu}_zero"
    while zero in names:
        zero += "_"
    for i, node in enumerate(fixed.graph.node):
        if node.name == relu and node.op_type == "Relu":
            fixed.graph.initializer.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), zero))
            fixed.graph.node[i].CopyFrom(helper.make_node("Max", [node.input[0], zero], list(node.output), name=relu))
            return fixed
    raise BadInputError(f"the model has no Relu node {relu!r}", hint="pass --model with the .onnx that was compared")


def fix_fused_activation(source: Source, relu: str, *, model: str | None, out: Path, timeout: float, force: bool,
                         progress: Progress, host_options: dict[str, str] | None = None) -> FixResult:
    """Write ``<model>.relu-unfused.onnx`` and prove what this machine can (see the module)."""
    from ..baseline import run_baseline
    from ..mnn.model_reader import read_mnn_model
    from ..workers import run_worker
    from .fp16_range import fp32_check

    res = source.result
    ff = res.first_failing
    assert ff is not None and ff.fused is not None
    verdict = f"{res.verdict.kind} ({res.verdict.pattern})"
    model_path = Path(model or res.model or "")
    if model_path.suffix.lower() != ".onnx":
        raise BadInputError("the fused-activation fix edits the ONNX model the .mnn is converted from, and the "
                            "comparison names none", hint="pass --model with that .onnx")
    if source.baseline is None:
        raise BadInputError(f"{res.reference} is not a baseline's reference, so the sample inputs are unknown",
                            hint="compare against a `qnn-debug baseline` folder")
    original = ensure_node_names(load_onnx(model_path))
    fixed = unfuse(original, relu)
    onnx.checker.check_model(fixed)
    artefact = write_next_to(model_path, SUFFIX, fixed.SerializeToString())
    outputs = [o.name for o in graph_outputs(original)]
    before = numbers(res, outputs, report=str(source.path))
    relu_out = next(n.output[0] for n in original.graph.node if n.name == relu)
    fs.make_dirs(out, what="fix output directory")
    from .. import npz_safe

    sample = npz_safe.load_npz(source.baseline / INPUTS_FILE)
    proof = [fp32_check(original, fixed, {"sample": sample})]
    mnn: dict[str, Path] = {}
    with progress.stage("fix: convert", total=None, message="fix: converting both models with MNN's converter"):
        for role, path in (("original", model_path), ("fixed", artefact)):
            mnn[role] = out / f"{role}.mnn"
            run_worker("qnn_debug.workers.mnn_convert_worker", {"src": str(path), "dst": str(mnn[role])},
                       log_path=out / f"convert_{role}.log", timeout=timeout, what="MNN converter")
    before_mnn, after_mnn = read_mnn_model(mnn["original"]), read_mnn_model(mnn["fixed"])
    proof.append(_unfused_check(before_mnn, after_mnn, relu_out, ff.fused.op_type, ff.fused.op or ""))
    base = run_baseline(artefact, out / "baseline", inputs=source.baseline / INPUTS_FILE, force=force, mnn_gate=True,
                        progress=progress)
    gate = base.report.gate
    err = gate.max_rel_error if gate is not None else None
    proof.append(ProofCheck(name="MNN CPU matches the reference", passed=err is not None and err <= MNN_CPU_LIMIT,
                            detail=f"the fixed model's .mnn on MNN CPU fp32 against ONNX Runtime: max relative error "
                            f"{'n/a' if err is None else f'{err:.2g}'} (limit {MNN_CPU_LIMIT:g}; gate "
                            f"{gate.status if gate else 'not run'})"))
    after = _simulated(artefact, source.baseline / INPUTS_FILE, out, outputs, ff.tensor, timeout, force, progress)
    shipped, ship_check = ship_mnn(artefact, source=source, onnx_model=model_path, suffix=SUFFIX,
                                   inputs=source.baseline / INPUTS_FILE, out=out, timeout=timeout, force=force,
                                   progress=progress)
    proof.append(ship_check)
    rerun = (f"qnn-debug run {shlex.quote(shipped.path or str(mnn['fixed']))} --target device --baseline "
             f"{shlex.quote(str(out / 'baseline'))}")
    left: list[str] = []
    host_checks: list[ProofCheck] = []
    if host_options:
        host_checks, left = _on_host(artefact, source.baseline / INPUTS_FILE, out, outputs, ff.tensor, relu,
                                     ff.fused.op or "", host_options, after, timeout, force, progress)
        proof += host_checks
    proven = all(c.passed for c in proof)
    from ..next_step import NextStep

    if not host_checks:
        not_proven = [f"that MNN's QNN backend now computes {relu} (the separate BinaryOp) right: this needs the "
                      f"phone or a host MNN build with the QNN backend (fix again with --option mnn_build_dir=... "
                      f"--option qnn_lib_dir=...); run: {rerun}"]
        tail = "Not proven without the phone or a host MNN build: MNN's QNN translation of the separate op."
    else:
        not_proven = []
        tail = "On MNN's own QNN backend (host build): " + "; ".join(
            f"{c.name}: {'yes' if c.passed else 'NO'}" for c in host_checks) + "."
    steps = [NextStep(tool="run_on_device", cli=rerun, why="the fixed .mnn on the phone's QNN backend, judged "
                      "against the fp32 reference: the first failing op must be gone")]
    failed = [c.name for c in proof if not c.passed]
    summary = (f"{'Proven here' if proven else 'NOT proven (failed: ' + '; '.join(failed) + ')'}: {relu} (Relu fused into {ff.fused.op_type} {ff.fused.op}) "
               f"rewritten as Max(x, 0) in {artefact.name}; {proof[1].detail}. Before: {_n(before)}; the fixed ONNX "
               f"on the HTP simulator (ONNX Runtime's QNN EP, not MNN's translation): {_n(after) if after else 'n/a'}. "
               + tail)
    return FixResult(kind="fused_activation", verdict=verdict, summary=summary, artefact=str(artefact),
                     proven=proven, proof=proof, not_proven=not_proven, before=before, after=after, out=str(out),
                     next_steps=steps, mnn=shipped, left=left,
                     mnn_models={k: str(v) for k, v in mnn.items()})


def _simulated(artefact: Path, inputs: Path, out: Path, outputs: list[str], tensor: str, timeout: float, force: bool,
               progress: Progress) -> Numbers | None:
    """After numbers: the fixed ONNX diagnosed on the HTP simulator (Qualcomm's numerics, ORT's QNN translation)."""
    from ..diagnose import diagnose

    diag = diagnose(artefact, out / "htp-sim", inputs=inputs, target="htp-sim", force=force, mnn_gate=True,
                    timeout=timeout, progress=progress)
    if diag.compare is None:
        return None
    rows = {r.stands_for or r.name for r in diag.compare.tensors}
    return numbers(diag.compare, outputs, tensor=tensor if tensor in rows else None, report=diag.report_dir)


def _on_host(artefact: Path, inputs: Path, out: Path, outputs: list[str], tensor: str, relu: str, fused_op: str,
             options: dict[str, str], qnn_ep: Numbers | None, timeout: float, force: bool,
             progress: Progress) -> tuple[list[ProofCheck], list[str]]:
    """The fixed ONNX diagnosed on MNN's own QNN backend (a host build, its baseline gated on MNN CPU), judged by
    what the fix was for: the fused op's jump is gone and no op jumps. The outputs against the fp16 floor and
    against ONNX Runtime's QNN EP on the same simulator are measured and what they leave is said."""
    from ..diagnose import diagnose

    diag = diagnose(artefact, out / "host", inputs=inputs, target="host", force=force, mnn_gate=True,
                    target_options=options, timeout=timeout, progress=progress)
    res = diag.compare
    if res is None:
        return [ProofCheck(name="MNN's QNN backend (host build) ran the fixed model", passed=False,
                           detail=f"the host run gave no comparison (report {diag.report_dir})")], []
    runs = (Path(diag.baseline), Path(diag.target_run), out / "htp-sim" / "htp-sim")  # same model, same inputs
    line = "qnn-debug compare-targets " + " ".join(shlex.quote(str(p)) for p in runs)
    return host_checks(res, outputs, tensor, relu, fused_op, qnn_ep, diag.report_dir, line)


def host_checks(res: CompareResult, outputs: list[str], tensor: str, relu: str, fused_op: str,
                qnn_ep: Numbers | None, report: str | None,
                compare_targets: str | None = None) -> tuple[list[ProofCheck], list[str]]:
    """The checks of a host run of the fixed model and what is left (see :func:`_on_host`)."""
    rows = {r.stands_for or r.name: r for r in res.tensors}
    after = numbers(res, outputs, tensor=tensor if tensor in rows else None, report=report)
    ff = res.first_failing
    row = rows.get(tensor)
    covers = ff is not None and ff.fused is not None and any(n.startswith(f"{relu} (") for n in ff.fused.model_nodes)
    still = ff is not None and res.verdict.kind != "ok" and (
        ff.tensor == tensor or (bool(fused_op) and ff.op == fused_op) or covers)
    jump_limit = float(res.thresholds.get("jump_db", JUMP_DB))
    gone = not still and row is not None and (row.jump_db is None or row.jump_db < jump_limit)
    at = (f"{tensor}: {_db(row.metrics.get('sqnr_db'))}, "
          + (f"its error {row.jump_db:+.1f} dB over its inputs' (a jump is {jump_limit:g} dB)" if row.jump_db
             is not None else "no jump measured") if row is not None
          else f"{tensor} not aligned in the host run, so its jump cannot be shown gone")
    if covers and ff is not None and ff.fused is not None:
        at += f"; {relu} is still fused into {ff.fused.op} ({ff.fused.op_type})"
    checks = [ProofCheck(name="the fused op's jump is gone (host build)", passed=gone,
                         detail=f"{at}; first failing now "
                         + (f"{ff.op} ({ff.op_type}) at {ff.tensor}" if ff is not None and res.verdict.kind != "ok"
                            else "none") + f" (report {report})")]
    # an op jumps when compare finds one that computes wrong on its own inputs (a real bug at a first failing op);
    # tensors worse than the floor whose ops re-run within their local floor are precision, not a jump
    jumping = res.verdict.kind not in ("ok", "precision")
    worse = [r for r in res.tensors if r.status == "bad"]
    where = (f"first failing {ff.op} ({ff.op_type}) at {ff.tensor}" if ff is not None and jumping else
             f"{len(worse)} of {len(res.tensors)} aligned tensors are worse than their fp16 floor, every suspect op "
             "within its local floor when re-run on its own inputs" if worse else "every tensor at its fp16 floor")
    checks.append(ProofCheck(name="no op jumps beyond its floor (host build)", passed=not jumping,
                             detail=f"verdict {res.verdict.kind} ({res.verdict.pattern}): {where}; the fixed model on "
                             f"the host build: {_n(after)}"))
    left: list[str] = []
    for o in outputs:
        r = rows.get(o)
        got = r.metrics.get("sqnr_db") if r else None
        floor = (r.floor_metrics or {}).get("sqnr_db") if r else None
        ep = qnn_ep.outputs_sqnr_db.get(o) if qnn_ep is not None else None
        if got is None:
            continue
        gaps = []
        if floor is not None and floor - got > OUTPUT_GAP_DB:
            gaps.append(f"{floor - got:.1f} dB below the fp16 floor ({_db(floor)})")
        if ep is not None and ep - got > OUTPUT_GAP_DB:
            gaps.append(f"{ep - got:.1f} dB below ONNX Runtime's QNN EP on the same simulator ({_db(ep)})")
        if gaps:
            left.append(f"output {o} on MNN's QNN path is {_db(got)}: " + " and ".join(gaps)
                        + (", with no op jumping: the loss is spread over many ops" if not jumping else "")
                        + "; locate where MNN's path loses against the QNN EP tensor by tensor with "
                        + (f"`{compare_targets}`" if compare_targets else "`qnn-debug compare-targets BASELINE "
                           "HOST_RUN HTP_SIM_RUN`"))
    return checks, left


OUTPUT_GAP_DB = 6.0  # an output this far below the floor or the QNN EP is a gap worth saying
JUMP_DB = 15.0  # compare's jump threshold, when the result does not carry its own


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def _n(n: Numbers) -> str:
    def db(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f} dB"

    outs = ", ".join(f"{o} {db(v)}" for o, v in n.outputs_sqnr_db.items())
    return f"{n.verdict} ({n.pattern}), {db(n.tensor_sqnr_db)} at {n.tensor}, outputs {outs}"


def _unfused_check(before: Any, after: Any, relu_out: str, fused_type: str, fused_op: str = "") -> ProofCheck:
    """The activation's tensor is written by a new BinaryOp of its own. When the fused op is a BinaryOp itself
    (Add + Relu merged into it), the producer changes from that op to the new one rather than changing type."""
    def producer(m: Any) -> Any:
        idx = m.tensor_index(relu_out)
        return m.producer(idx) if idx is not None else None

    def producer_type(m: Any) -> str | None:
        op = producer(m)
        return op.type_name if op is not None else None

    def binary(m: Any) -> int:
        return sum(1 for op in m.ops if op.type_name == "BinaryOp")

    was, now = producer_type(before), producer_type(after)
    extra = binary(after) - binary(before)
    old_op, new_op = producer(before), producer(after)
    moved = was != "BinaryOp" or (old_op is not None and new_op is not None and old_op.name != new_op.name)
    passed = now == "BinaryOp" and moved and extra == 1
    return ProofCheck(name="the converted .mnn keeps the activation as its own op", passed=passed,
                      detail=f"{relu_out} is produced by {was} before and by {now} after ({len(before.ops)} -> "
                      f"{len(after.ops)} ops, {extra:+d} BinaryOp; the {fused_type} no longer carries it)")
