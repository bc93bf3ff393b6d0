"""Check one suspect: cut it out, re-run it on the target's inputs, and test alternative semantics."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..runstore import QuantParams, Run
from .align import load_in_reference_layout, match_layout
from .local_error import Fetch, LocalRunError, ModelIndex, measure, prepare
from .localize import Suspect
from .patterns import PatternContext, run_tests
from .schema import LocalError
from .thresholds import Thresholds
from .verdict import Finding


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
                  quantized: bool, th: Thresholds, patterns: bool = True,
                  observed_as: Mapping[str, str] | None = None) -> Finding:
    """Local error of the suspect (and, when it is wrong, the pattern that reproduces the target)."""
    names = [n.name for n in suspect.segment] + [suspect.op.name]
    try:
        run = prepare(index, names, fetcher(reference, target, observed_as))
    except LocalRunError as e:
        return Finding(suspect, LocalError(note=str(e), segment=names))
    rec = target.info((observed_as or {}).get(suspect.tensor, suspect.tensor))
    target_out = load_in_reference_layout(target, rec, reference.info(suspect.tensor).shape).astype(np.float32)
    try:
        le = measure(run, suspect.tensor, target_out, op_type=suspect.op.op_type, quant_scale=quant_step(rec.quant),
                     th=th)
    except LocalRunError as e:
        return Finding(suspect, LocalError(note=str(e), segment=names))
    finding = Finding(suspect, le, reads_graph_input=any(b in index.graph_inputs for b in run.segment.boundary))
    if le.ok is False and patterns and suspect.tensor in run.outputs:
        local = run.outputs[suspect.tensor]
        if local.size == target_out.size:
            ctx = PatternContext(run, suspect.tensor, target_out.reshape(local.shape), le.sqnr_db, quantized, th)
            finding.best, finding.trials = run_tests(ctx)
            node = finding.best.details.get("node") if finding.best is not None else None
            finding.pinned = next((op for op in suspect.segment if op.name == node), None)
    return finding
