"""The local re-run stage: cut each suspect out, re-run it on the target's own inputs, stop at the first wrong one.

Small local error means the op did its job on what it was given (the damage came from upstream or is
precision); large local error means the op itself computed something else. The first op found wrong is
handed to the patterns stage with what it needs to test alternative semantics (:class:`Confirmed`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..progress import NULL_PROGRESS, Progress
from ..runstore import QuantParams, Run
from .align import load_in_reference_layout, match_layout
from .local_error import Fetch, LocalRunError, ModelIndex, measure, prepare
from .localise import Located, Suspect
from .patterns import PatternContext
from .schema import LocalError, TensorRow
from .stage_types import Confirmed, Finding, Rerun
from .thresholds import Thresholds


def rerun_suspects(located: Located, reference: Run, target: Run, rows: Mapping[str, TensorRow], *,
                   quantized: bool, th: Thresholds, progress: Progress = NULL_PROGRESS) -> Rerun:
    """Re-run the suspects in execution order (at most ``th.max_local_checks``) until one is wrong."""
    suspects, index = located.suspects, located.index
    if not suspects or index is None:
        return Rerun([Finding(s, None) for s in suspects])
    observed_as = {n: r.name for n, r in rows.items()}
    out = Rerun([])
    with progress.stage("compare: local error", total=min(len(suspects), th.max_local_checks),
                        message="compare: re-running suspect ops on CPU") as advance:
        for suspect in suspects[: th.max_local_checks]:
            finding, context = check_suspect(index, suspect, reference, target, quantized=quantized, th=th,
                                             observed_as=observed_as)
            out.findings.append(finding)
            advance()
            if finding.local is not None and finding.local.ok is False:
                out.confirmed = Confirmed(finding, context)
                break
    return out


def fetcher(reference: Run, target: Run, observed_as: Mapping[str, str] | None = None) -> Fetch:
    """Values for a segment input: the target's own (in reference layout) when it has them.

    ``observed_as`` maps a reference tensor to the target tensor standing for it (its first observation,
    e.g. ``x@cast`` for ``x``), so an op is re-run on what the target really held.
    """

    def fetch(name: str) -> tuple[np.ndarray, str] | None:
        ref_shape = reference.info(name).shape if reference.has(name) else None
        own = (observed_as or {}).get(name, name)
        if target.has(own):
            rec = target.info(own)
            if ref_shape is None or match_layout(ref_shape, rec.shape) is not None:
                return load_in_reference_layout(target, rec, ref_shape or rec.shape), "target"
        if reference.has(name):
            return np.asarray(reference.array(name, mmap=False)), "reference"
        return None

    return fetch


def quant_step(quant: QuantParams | None) -> float | None:
    """One quantization step of a tensor (the mean over channels for per-channel encodings)."""
    if quant is None:
        return None
    return float(np.mean(quant.scale)) if isinstance(quant.scale, list) else float(quant.scale)


def check_suspect(index: ModelIndex, suspect: Suspect, reference: Run, target: Run, *,
                  quantized: bool, th: Thresholds,
                  observed_as: Mapping[str, str] | None = None) -> tuple[Finding, PatternContext | None]:
    """Local error of the suspect, and (when it is wrong) what the pattern tests need."""
    names = [n.name for n in suspect.segment] + [suspect.op.name]
    fetch = fetcher(reference, target, observed_as)
    try:
        run = prepare(index, names, fetch)
    except LocalRunError as e:
        return Finding(suspect, LocalError(note=str(e), segment=names)), None
    rec = target.info((observed_as or {}).get(suspect.tensor, suspect.tensor))
    target_out = load_in_reference_layout(target, rec, reference.info(suspect.tensor).shape).astype(np.float32)
    try:
        le = measure(run, suspect.tensor, target_out, op_type=suspect.op.op_type, quant_scale=quant_step(rec.quant),
                     th=th)
    except LocalRunError as e:
        return Finding(suspect, LocalError(note=str(e), segment=names)), None
    finding = Finding(suspect, le, reads_graph_input=any(b in index.graph_inputs for b in run.segment.boundary))
    context = None
    if le.ok is False and suspect.tensor in run.outputs:
        local = run.outputs[suspect.tensor]
        if local.size == target_out.size:
            context = PatternContext(run, suspect.tensor, target_out.reshape(local.shape), le.sqnr_db, quantized, th,
                                     fetch=fetch)
    return finding, context
