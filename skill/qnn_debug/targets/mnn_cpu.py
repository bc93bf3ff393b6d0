"""MNN CPU fp32 with every tensor captured: the trusted-baseline gate for ONNX models, the reference for .mnn.

``import MNN`` writes to fd 1, so everything MNN happens in :mod:`qnn_debug.workers.mnn_worker`.
For an ONNX model, MNN's tensors are stored under the ONNX names they share with the model (the
converter keeps tensor names where it does not fuse), with the ONNX producer's position, so the gate
can compare them with the ORT reference tensor by tensor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..progress import NULL_PROGRESS, Progress
from ..runstore import ModelInfo, Run, RunRecord, RunRole, TensorSpec, sha256_file
from ..versions import library_versions
from .worker_run import run_capture_worker

if TYPE_CHECKING:
    import onnx

    from ..inputs import PreparedInputs
    from ..mnn.model_reader import MnnModel

WORKER = "qnn_debug.workers.mnn_worker"


def mnn_io(model: MnnModel) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs (shape as declared, -1 → dynamic) and outputs of a ``.mnn`` model, read without MNN."""
    inputs = [TensorSpec(name=i.name, shape=[d if d > 0 else None for d in i.shape], dtype=i.dtype) for i in model.inputs]
    return inputs, [TensorSpec(name=n, shape=[], dtype="float32") for n in model.output_names]


def _mnn_names(model: MnnModel) -> dict[str, list[Any]]:
    """Every op output of a ``.mnn`` model → [position, op name, MNN op type, kind], in stored op order."""
    outputs = set(model.output_names)
    names: dict[str, list[Any]] = {}
    for op in model.ops:
        if op.type_name == "Input":
            continue
        for index in op.outputs:
            name = model.tensor_name(index)
            if name is not None and name not in names:
                names[name] = [op.position, op.name or name, op.type_name, "output" if name in outputs else "activation"]
    return names


def run_mnn_cpu(model_path: str | os.PathLike[str], prepared: PreparedInputs, out: str | os.PathLike[str], *,
                role: RunRole, onnx_model: onnx.ModelProto | None = None, force: bool = False,
                timeout: float = 1800.0, progress: Progress = NULL_PROGRESS,
                source_onnx: onnx.ModelProto | None = None) -> Run:
    """Run ``model_path`` (``.onnx`` → converted, or ``.mnn``) on MNN CPU fp32 and store every tensor.

    With ``onnx_model`` given, only tensors whose names exist in the ONNX graph are stored, with ONNX
    provenance; the converted ``.mnn`` is kept in the run directory as ``model.mnn``. For a ``.mnn``
    model, positions and op types come from the model's own op list; ``source_onnx`` (the ONNX model it was
    converted from) lets the run say which tensors a fused op wrote under an earlier tensor's name.
    """
    path = Path(model_path).resolve()
    if onnx_model is not None:
        from .onnx_capture import capture_plan, model_info

        info = model_info(path, onnx_model)
        names = {p.name: [p.position, p.op, p.op_type, p.kind] for p in capture_plan(onnx_model) if p.kind != "input"}
        outputs = [o.name for o in onnx_model.graph.output]
    else:
        from ..mnn.model_reader import read_mnn_model

        mnn = read_mnn_model(path)
        specs, outs = mnn_io(mnn)
        info = ModelInfo(path=str(path), sha256=sha256_file(path), format="mnn", inputs=specs, outputs=outs)
        names, outputs = _mnn_names(mnn), list(mnn.output_names)
    record = RunRecord(role=role, target="mnn-cpu", precision="fp32", model=info, inputs=prepared.info,
                       versions=library_versions(), outputs=outputs, warnings=list(prepared.warnings))
    graph = onnx_model if onnx_model is not None else source_onnx
    producers: dict[str, str] = {}
    if graph is not None:
        from .onnx_capture import capture_plan

        producers = {p.name: p.op for p in capture_plan(graph) if p.kind != "input" and p.op}
    request = {"model": str(path), "format": "onnx" if onnx_model is not None else "mnn", "force": force,
               "record": record.model_dump(mode="json"), "names": names, "onnx_producers": producers}
    return run_capture_worker(WORKER, request, Path(out).resolve(), prepared.arrays, log_name="mnn_worker.log",
                              what="MNN CPU run", timeout=timeout, progress=progress)
