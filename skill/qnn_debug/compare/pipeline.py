"""``compare_runs``: reference (+ fp16 floor) vs target, as seven stages, each a call into its own module.

1. align (:mod:`.align`): pair tensors by name, layout and alias; refuse runs on other inputs;
2. metrics (:mod:`.rows`): stream every pair through the one comparator, judge each row against the floor,
   check the graph inputs' copies, detect a quantized target;
3. localise (:mod:`.localise`): suspects where the excess over the floor jumps;
4. local re-run (:mod:`.checks`): re-run each suspect on the target's own inputs until one is wrong;
5. patterns (:mod:`.pattern_stage` over :mod:`.patterns`): which wrong semantics reproduce it; an op leaving
   the fp16 range, an encoding that clips;
6. verdict (:mod:`.rules` over :mod:`.verdict`): the first verdict rule that holds gives kind, pattern,
   confidence, evidence and the first failing op — no words;
7. wording (:mod:`.rules` over :mod:`.wording`): that rule's summary sentence and structured next steps.

``compare_paths`` adds the file handling around it (baseline dirs, MNN dumps, ``.npz`` targets, report files).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from .. import fs
from ..errors import BadInputError
from ..htp_fp16 import Fp16Codes
from ..progress import NULL_PROGRESS, Progress
from ..runstore import MNN_DIR, Run, atomic_write_text, sha256_file
from . import rules
from .align import align_runs
from .checks import rerun_suspects
from .dump_location import locate_in_dump
from .importers import ReferenceSide, open_reference, open_target, target_kind
from .localise import localise
from .model_diff import ModelDifference, NodeDifference, describe, model_difference
from .options import CompareOptions
from .pattern_stage import find_patterns
from .probe_args import probe_args
from .rail import mark_rows
from .rows import PREFETCH_AHEAD, measure
from .schema import CompareResult, FirstFailing
from .shipped import shipped_check
from .top1 import top1_agreement
from .trust import mark_trust
from .unaligned import by_reason
from .verdict import Findings, mark_first_failing, name_on_target, note_unchecked

__all__ = ["PREFETCH_AHEAD", "CompareOptions", "compare_paths", "compare_runs", "resolve_model"]


def compare_paths(reference: str | Path, target: str | Path, *, model: str | Path | None = None,
                  mnn_model: str | Path | None = None, execution: int | None = None,
                  report_dir: str | Path | None = None, json_path: str | Path | None = None,
                  options: CompareOptions | None = None, progress: Progress = NULL_PROGRESS,
                  fp16_codes: Fp16Codes = "htp") -> CompareResult:
    """Compare TARGET (run dir, MNN dump dir or ``.npz``) with REFERENCE (baseline or run dir).

    ``fp16_codes`` says how an MNN dump's FLOAT_16 buffers encode exponent-31 codes: ``htp`` (finite, up to
    131008; HTP has no inf/NaN) or ``ieee`` (inf/NaN, for an IEEE-fp16 producer)."""
    side = open_reference(reference)
    kind = target_kind(target)
    report = Path(report_dir) if report_dir is not None else None
    if json_path is not None:
        _check_json_path(Path(json_path))
    with contextlib.ExitStack() as stack:
        if kind == "run":
            work = Path(target)
        elif report is not None:
            work = report / "target_run"
        else:
            work = stack.enter_context(fs.scratch("qnn-debug-target-"))
        guess = mnn_model or _mnn_model_guess(side, model)
        run, kind = open_target(target, reference=side.reference, work_dir=work,
                                mnn_model=Path(guess) if guess else None, execution=execution, progress=progress,
                                fp16_codes=fp16_codes)
        # without local re-runs the graph is all the comparison reads: a model with external data (LLM size) is
        # opened without its weights
        onnx_model, model_path, note = resolve_model(side.reference, model,
                                                     weights=(options or CompareOptions()).local_checks)
        result = compare_runs(side, run, model=onnx_model, model_path=model_path, target_kind=kind,
                              options=options, progress=progress, model_note=note,
                              mnn_model=str(guess) if guess else None)
        result.target = str(target)
        locate_in_dump(result, run)
        _modulebasic_rule(result)
        result.next_steps = rules.next_steps(result)  # its commands name the target as the user gave it
        if report is not None:
            from .report import write_report

            result.report_files = write_report(result, report)
        if json_path is not None:
            atomic_write_text(Path(json_path), result.model_dump_json(indent=1))
        return result


def _check_json_path(path: Path) -> None:
    if path.is_dir():
        raise BadInputError(f"--json {path} is a directory", hint="give a file name, or `--json -` for stdout")
    if path.exists() and path.suffix.lower() != ".json":
        raise BadInputError(f"refusing to overwrite {path} with the JSON result (it is not a .json file)",
                            hint="give a new file name ending in .json, or `--json -` for stdout")


def _usable(path: Path) -> bool:
    """A path found inside our own files (run.json) that the roots allow and that is a regular file."""
    try:
        fs.check(path, what="model", kind="file")
    except BadInputError:
        return False
    return True


def _mnn_model_guess(side: ReferenceSide, model: str | Path | None) -> Path | None:
    """The .mnn that names t<N> in an MNN dump: --model if it is one, else the baseline's converted model."""
    if model is not None and Path(model).suffix.lower() == ".mnn":
        return Path(model)
    info = side.reference.record.model
    if info is not None and info.format == "mnn" and Path(info.path).exists() and _usable(Path(info.path)):
        return Path(info.path)
    if side.baseline_dir is not None:
        found = sorted((side.baseline_dir / MNN_DIR).glob("*.mnn"))
        if found:
            return found[0]
    return None


def resolve_model(reference: Run, model: str | Path | None, *,
                  weights: bool = True) -> tuple[Any, str | None, str | None]:
    """(onnx model or None, its path, why there is none). A given model must be the reference's own.
    ``weights=False`` leaves external weights in their files (only the graph is needed)."""
    from ..onnx_graph import load_onnx

    info = reference.record.model
    if model is not None and Path(model).suffix.lower() != ".mnn":
        path = Path(model)
        loaded = load_onnx(path, load_external_data=weights)
        if info is not None and info.format == "onnx" and info.sha256 and sha256_file(path) != info.sha256:
            raise BadInputError(
                f"--model {path} is not the model the reference was built from ({info.path})",
                hint="pass the model given to `qnn-debug baseline`, or leave --model out to use it",
            )
        return loaded, str(path), None
    if info is None or info.format != "onnx":
        return None, None, "no ONNX model for this reference (pass --model MODEL.onnx to re-run ops)"
    path = Path(info.path)
    if not path.exists():
        return None, None, f"the reference's model {path} no longer exists (pass --model)"
    try:  # a path read from run.json is checked like any argument: inside the roots, a regular file
        fs.check(path, what="the reference's model", kind="file")
    except BadInputError as e:
        return None, None, f"{e.message} (pass --model)"
    if info.sha256 and sha256_file(path) != info.sha256:
        return None, None, f"the reference's model {path} changed since the baseline (pass --model)"
    return load_onnx(path, load_external_data=weights), str(path), None


def compare_runs(side: ReferenceSide, target: Run, *, model: Any = None, model_path: str | None = None,
                 target_kind: str = "run", options: CompareOptions | None = None,
                 progress: Progress = NULL_PROGRESS, model_note: str | None = None,
                 mnn_model: str | None = None) -> CompareResult:
    """The comparison itself, on loaded runs; ``model`` (an ONNX ModelProto) enables local re-runs;
    ``mnn_model`` (the target's .mnn) is read for quant attributes."""
    t_start = time.monotonic()
    opts = options or CompareOptions()
    th = opts.thresholds
    ref = side.reference
    producers = None
    if model is not None:
        from ..onnx_graph import producer_map

        producers = producer_map(model)
    # 1. align
    aligned = align_runs(ref, target, side.floor, producers=producers)
    # 2. metrics
    measured = measure(side, target, aligned, opts, model=model, mnn_model=mnn_model,
                       backend=target_kind == "mnn-dump", progress=progress)
    # 3. localise
    located = localise(model, ref, measured.rows, th, local_checks=opts.local_checks, model_note=model_note)
    # 4. local re-run
    rerun = rerun_suspects(located, ref, target, measured.rows, quantized=measured.quantized, th=th,
                           progress=progress)
    # 5. patterns
    patterns = find_patterns(rerun, measured, located, ref, target, semantics=opts.patterns)
    if patterns.overflow is not None:  # does the converted model hold that tensor at all (a fused LayerNorm)?
        patterns.overflow.shipped = shipped_check(patterns.overflow, located.ops, mnn_model)
    # 6. verdict
    findings = Findings.gather(measured, located, rerun, patterns, outputs=list(ref.record.outputs),
                               observer_effect_db=target.record.observer_effect_db, has_floor=side.floor is not None,
                               top1=top1_agreement(ref, target, ref.record.outputs, measured.rows))
    decision = rules.decide(findings, th)
    decision = name_on_target(decision, target, located.ops, located.graph_tensors(measured.rows))
    decision = note_unchecked(decision, located.suspects, len(rerun.findings))
    decision = mark_first_failing(decision, measured.all_rows, th)
    mark_rows(measured.all_rows, patterns.rail)
    difference = model_difference(model, model_path, target)
    here = _name_op_that_ran(decision.first, difference)
    # 7. wording
    warnings = [*target.record.warnings, *measured.warnings]
    if located.local_note:
        warnings.append(f"local error not computed: {located.local_note}")
    result = CompareResult(
        reference=str(ref.dir), target=str(target.dir), target_kind=target_kind,
        floor=str(side.floor.dir) if side.floor is not None else None, model=model_path, mnn_model=mnn_model,
        precision=target.record.precision, first_failing=decision.first,
        verdict=rules.verdict(decision, findings, th), tensors=sorted(measured.all_rows, key=lambda r: r.position),
        observer_effect_db=target.record.observer_effect_db, unaligned=aligned.unaligned,
        unaligned_by_reason=by_reason(aligned.unaligned),
        counts={"reference_tensors": len(ref.tensors), "target_tensors": len(target.tensors),
                "aligned": len(measured.all_rows), "aliases": sum(r.stands_for is not None for r in measured.all_rows),
                "unaligned": len(aligned.unaligned), "suspects": len(located.suspects),
                "local_checks": sum(f.local is not None for f in rerun.findings),
                "floor_aligned": sum(r.floor_metrics is not None for r in measured.all_rows)},
        warnings=warnings, thresholds=th.model_dump(), elapsed_s=round(time.monotonic() - t_start, 3),
    )
    _mark_target_model(result, difference, here, model, ref)
    note = target.record.extra.get("observer_effect")
    if isinstance(note, str):  # a plain dump: the effect measured from the unmarked outputs beside it, or why not
        result.verdict.evidence["observer_effect"] = note
    result.next_steps = rules.next_steps(result)
    return mark_trust(result, side)


def _name_op_that_ran(first: FirstFailing | None, difference: ModelDifference | None) -> NodeDifference | None:
    """Where the target's model computes the first failing tensor with another op: name that op, keep the
    reference's as ``model_op``."""
    here = difference.at(first.tensor) if difference is not None and first is not None else None
    if first is not None and here is not None:
        first.model_op, first.model_op_type = here.node, here.reference_op_type
        first.op_type = here.target_op_type or first.op_type
    return here


def _mark_target_model(result: CompareResult, difference: ModelDifference | None, here: NodeDifference | None,
                       model: Any, ref: Run) -> None:
    """Say so when the target ran another model than the reference's, and where it differs at the first failing op;
    give the first failing op's probe its real shapes and attributes."""
    if difference is not None:
        result.warnings.insert(0, difference.sentence())
    if here is not None:
        result.verdict.summary += (f" The two models differ at this op: {describe(here)}, so the difference may be "
                                   f"the model's own change rather than QNN's.")
        result.verdict.evidence["model_difference"] = here.model_dump()
    ff = result.first_failing
    if ff is not None and ff.fused is None and ff.target_tensor is None:
        args = probe_args(model, ref, ff.model_op or ff.op)
        other_op = here is not None and here.what == "op type"  # the reference's attributes belong to another op
        ff.probe = _shapes_only(args) if other_op else args


def _shapes_only(args: list[str]) -> list[str]:
    return [x for pair in zip(args[::2], args[1::2], strict=True) if pair[0] == "--shape" for x in pair]


def _modulebasic_rule(result: CompareResult) -> None:
    """Predicting ModuleBasic's TESTERROR from the outputs: say where the fp16 floor itself cannot meet its rule."""
    from .modulebasic_rule import RULE, unreachable_words

    e2e = result.verdict.evidence.get("end_to_end")
    if not isinstance(e2e, dict):
        return
    rows = {r.name: r for r in result.tensors if r.stands_for is None}
    for name, entry in e2e.items():
        row = rows.get(name)
        rate = (row.floor_metrics or {}).get("diff_rate") if row is not None else None
        if rate is None or not isinstance(entry, dict):
            continue
        entry["floor_diff_rate"] = rate
        entry["modulebasic_rule_met_by_floor"] = rate <= RULE
        if rate > RULE:
            result.warnings.append(unreachable_words(name, float(rate)))
