"""Marking in chunks: several marked HTP-simulator sessions, each exposing a subset of the tensors.

Why: marking every tensor at once can break the graph it is meant to observe — on a Qwen3-shaped
decoder in torch's export form (163 nodes, hidden 128) the mark-all graph fails to finalise with
QNN 1002 (MEM_ALLOC) while the unmarked graph builds — or change its numerics (fusions blocked). A chunk
marks far fewer tensors (one decoder layer, or ``chunk_size`` tensors), and each chunk's final outputs
are compared with the unmarked run, so a chunk that changed the graph is visible as its own observer
effect. The result is an ordinary run directory that ``compare`` reads like any dump.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..parallel import ParallelOptions
from ..progress import NULL_PROGRESS, Progress
from ..runstore import Run, RunRecord, prepare_run_dir
from ..versions import library_versions
from .cut import layer_of

WORKER = "qnn_debug.workers.sim_probe_worker"
DEFAULT_CHUNK = 48


class ChunkPlan(BaseModel):
    groups: list[list[str]]
    by: str  # "layer" or "size"


def plan_chunks(model: Any, chunk_size: int = DEFAULT_CHUNK) -> ChunkPlan:
    """Tensors to mark, grouped per decoder layer when node names carry one (else ``chunk_size`` at a time).

    Tensors outside the layers (embedding, rotary tables, final norm, head) form their own chunks, cut to
    ``chunk_size`` too, so no session marks more than a layer's worth.
    """
    from ..targets.onnx_capture import capture_plan

    planned = [p for p in capture_plan(model) if p.kind != "input"]
    layered = any(layer_of(p.op or "") is not None for p in planned)
    groups: list[list[str]] = []
    current: list[str] = []
    key: object = object()
    for p in planned:
        k = layer_of(p.op or "") if layered else None
        if current and (k != key or len(current) >= chunk_size):
            groups.append(current)
            current = []
        key = k
        current.append(p.name)
    if current:
        groups.append(current)
    return ChunkPlan(groups=groups, by="layer" if layered else "size")


def run_chunked_dump(model_path: Path, out: Path, *, inputs: Path, soc_model: int = 69, htp_arch: int | None = None,
                     options: dict[str, str] | None = None, chunk_size: int = DEFAULT_CHUNK, force: bool = False,
                     timeout: float = 1800.0, progress: Progress = NULL_PROGRESS, max_memory: int | None = None,
                     baseline: Path | None = None, parallel: ParallelOptions | None = None) -> Run:
    """An fp16 htp-sim run of ``model_path`` captured chunk by chunk (see the module docstring).

    A model whose weights are external and do not fit one session within ``max_memory`` runs unit by unit instead,
    as jobs of the parallel engine run as ``parallel`` says (:mod:`.chunked_stream`; the boundary shapes come from
    ``baseline``, built piece by piece)."""
    from ..inputs import fix_input_shapes, prepare_inputs
    from ..onnx_graph import ensure_node_names, graph_inputs, load_onnx
    from ..targets import qnn_ep
    from ..targets.htp_sim import split_options
    from ..targets.onnx_capture import model_info, serialize
    from ..targets.sim_lowering import lower_for_simulator
    from ..targets.worker_run import run_capture_worker
    from .bisect_stream import streams
    from .budget import default_budget

    extra, disabled, _ = split_options(options or {})
    provider = qnn_ep.provider_options(soc_model, htp_arch, extra)
    budget = max_memory or default_budget()
    if baseline is not None and streams(model_path, budget):
        from .chunked_stream import run_streamed

        return run_streamed(model_path, out, inputs=inputs, provider=provider, disabled=disabled, budget=budget,
                            baseline=baseline, soc_model=soc_model, force=force, timeout=timeout, progress=progress,
                            parallel=parallel)
    model = ensure_node_names(load_onnx(model_path))
    prepared = prepare_inputs(graph_inputs(model), inputs=inputs)
    fixed = fix_input_shapes(model, prepared.shapes)
    lowered = lower_for_simulator(fixed)
    chunks = plan_chunks(fixed, chunk_size)
    run_dir = prepare_run_dir(out, force=force).resolve()
    record = RunRecord(role="target", target="htp-sim", precision="fp16", model=model_info(model_path, model),
                       inputs=prepared.info, soc_model=soc_model,
                       htp_arch=int(provider["htp_arch"]) if "htp_arch" in provider else None,
                       versions=library_versions(), outputs=[o.name for o in model.graph.output],
                       warnings=[*prepared.warnings, *lowered, f"captured in {len(chunks.groups)} marked sessions (one per "
                                 f"{'decoder layer' if chunks.by == 'layer' else f'{chunk_size} tensors'}), "
                                 "not in one mark-all run"])
    request = {"job": "chunked", "force": True, "record": record.model_dump(mode="json"), "options": provider,
               "disabled_optimizers": disabled, "groups": chunks.groups}
    return run_capture_worker(WORKER, request, run_dir, prepared.arrays, log_name="htp_chunked_worker.log",
                              what="HTP simulator chunked run", timeout=timeout, progress=progress,
                              files={"model": serialize(fixed)})
