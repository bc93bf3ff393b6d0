"""The fp32 reference: every float tensor of an ONNX model, computed by ONNX Runtime's CPU EP.

Runs in the calling process: the CPU EP prints nothing to stdout and is far cheaper than a worker.
For a QDQ model the reference is the *fake-quant* run (graph optimisation off, so each
DequantizeLinear → float op → QuantizeLinear runs in float): ORT's integer QDQ kernels saturate on
AVX2 hosts without VNNI and would blame the NPU for the CPU's error.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..progress import NULL_PROGRESS, Progress
from ..runstore import Run, RunRecord, RunRole, RunWriter
from ..versions import library_versions
from .onnx_capture import capture_plan, is_qdq_model, model_info, qdq_points, run_on_cpu, write_plan

if TYPE_CHECKING:
    import onnx

    from ..inputs import PreparedInputs


def capture_on_cpu(model_path: str | os.PathLike[str], model: onnx.ModelProto, prepared: PreparedInputs,
                   out: str | os.PathLike[str], *, role: RunRole, target: str, precision: str,
                   run_model: onnx.ModelProto | None = None, force: bool = False,
                   progress: Progress = NULL_PROGRESS, extra: dict[str, Any] | None = None) -> Run:
    """Mark-all run of ``run_model`` (default ``model``) on ORT CPU, stored under ``model``'s names.

    ``model`` is the user's (shape-fixed) graph and decides what is captured; ``run_model`` may be a
    transformed copy that keeps those names (the fp16 floor).
    """
    qdq = is_qdq_model(model)
    plan = capture_plan(model)
    points = qdq_points(model) if qdq else []
    record = RunRecord(
        role=role, target=target, precision=precision, model=model_info(model_path, model),
        inputs=prepared.info, versions=library_versions(), warnings=list(prepared.warnings),
        outputs=[o.name for o in model.graph.output],
        extra={"qdq_model": qdq, "graph_optimization": "disabled (fake-quant)" if qdq else "default", **(extra or {})},
    )
    writer = RunWriter(out, record, force=force)
    names = [p.name for p in plan if p.kind != "input"]
    with progress.stage(f"{target}: run", total=None, message=f"{target}: running {len(names)} marked tensors on ORT CPU"):
        values = run_on_cpu(run_model if run_model is not None else model, prepared.arrays, names, optimize=not qdq,
                            points=points)
    with progress.stage(f"{target}: save", total=len(plan), message=f"{target}: saving tensors") as advance:
        missing = write_plan(writer, plan, values, prepared.arrays, points=points, advance=advance)
    if missing:
        record.warnings.append(f"{len(missing)} planned tensor(s) were not returned: {', '.join(missing[:10])}")
    return writer.finish()


def run_reference(model_path: str | os.PathLike[str], model: onnx.ModelProto, prepared: PreparedInputs,
                  out: str | os.PathLike[str], *, force: bool = False, progress: Progress = NULL_PROGRESS) -> Run:
    """The fp32 reference run (``role="reference"``, target ``ort-cpu``)."""
    precision = "fp32-fakequant" if is_qdq_model(model) else "fp32"
    return capture_on_cpu(model_path, model, prepared, out, role="reference", target="ort-cpu",
                          precision=precision, force=force, progress=progress)
