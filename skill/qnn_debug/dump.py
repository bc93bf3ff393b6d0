"""``run_dump``: capture every tensor of a model on a QNN target (``htp-sim``, ``device``, ``host``).

The target does the work (see :mod:`qnn_debug.targets`); this module only dispatches and summarises
the run for the CLI and the MCP server.
"""

from __future__ import annotations

from .dump_models import DumpResult
from .progress import NULL_PROGRESS, Progress
from .runstore import Run
from .targets import DumpRequest, get_target


def run_dump(request: DumpRequest, progress: Progress = NULL_PROGRESS) -> DumpResult:
    """Run ``request.target``'s capture and summarise the finished run directory."""
    run = get_target(request.target)(request, progress)
    return summarize(run)


def summarize(run: Run) -> DumpResult:
    rec = run.record
    # The marked graph also holds the capture nodes we inserted (fp16 views); the model's own graph
    # on QNN is the unmarked session's count when the target recorded it.
    counts = rec.extra.get("qnn_nodes")
    if isinstance(counts, dict) and isinstance(counts.get("unmarked"), int):
        qnn = counts["unmarked"]
    else:
        qnn = sum(len(a.get("nodes", [])) for a in rec.assignment if a.get("provider") == "QNNExecutionProvider")
    return DumpResult(
        out=str(run.dir), target=rec.target, precision=rec.precision, soc_model=rec.soc_model, htp_arch=rec.htp_arch,
        tensors=len(rec.tensors), quantized_tensors=sum(t.quant is not None for t in rec.tensors),
        qnn_nodes=qnn if rec.assignment else None, outputs=rec.outputs, observer_effect_db=rec.observer_effect_db,
        warnings=rec.warnings, inputs_sha256=rec.inputs.sha256 if rec.inputs else None,
    )
