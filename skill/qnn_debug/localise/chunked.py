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
                     baseline: Path | None = None) -> Run:
    """An fp16 htp-sim run of ``model_path`` captured chunk by chunk (see the module docstring).

    A model whose weights are external and do not fit one session within ``max_memory`` runs as a chain of
    pieces instead (:func:`_run_streamed`; the boundary shapes come from ``baseline``, built piece by piece)."""
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
        return _run_streamed(model_path, out, inputs=inputs, provider=provider, disabled=disabled, budget=budget,
                             baseline=baseline, soc_model=soc_model, force=force, timeout=timeout, progress=progress)
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


def _run_streamed(model_path: Path, out: Path, *, inputs: Path, provider: dict[str, str], disabled: list[str],
                  budget: int, baseline: Path, soc_model: int, force: bool, timeout: float,
                  progress: Progress) -> Run:
    """Chunked marking of a model too large for one session: the worker runs the unmarked model as a chain of pieces
    within ``budget`` and then each unit (decoder layer) marked, fed the marked units' own values
    (``sim_probe_worker._chunked_chain``); only the graph is in memory here, and every piece points into the
    original data file."""
    from dataclasses import astuple

    from .. import fs
    from ..baseline import load_baseline
    from ..inputs import fix_input_shapes, prepare_inputs
    from ..onnx_graph import graph_inputs
    from ..targets.onnx_capture import capture_plan, model_info
    from ..targets.worker_run import run_capture_worker
    from .bisect_stream import boundary_shapes
    from .external import LazyModel, open_lazy
    from .pieces import Chain, plan_chain, save_pieces
    from .stream_baseline import hidden_bytes

    opened = open_lazy(model_path)
    prepared = prepare_inputs(graph_inputs(opened.model), inputs=inputs)
    lazy = LazyModel(opened.path, fix_input_shapes(opened.model, prepared.shapes), opened.base)
    chain = plan_chain(lazy.model, budget, hidden_bytes(prepared.arrays))
    shapes = boundary_shapes(load_baseline(baseline).reference, prepared.arrays)
    run_dir = prepare_run_dir(out, force=force).resolve()
    with fs.scratch("qnn-debug-pieces-") as work:
        pieces = save_pieces(lazy, chain, shapes, work, "piece")
        units = save_pieces(lazy, Chain(chain.units, chain.units, [[k] for k in range(len(chain.units))]), shapes,
                            work, "unit")
        lowered = list(dict.fromkeys(w for p in units for w in p.pop("lowered")))
        for p in pieces:
            p.pop("lowered")
        record = RunRecord(role="target", target="htp-sim", precision="fp16", model=model_info(model_path, lazy.model),
                           inputs=prepared.info, soc_model=soc_model,
                           htp_arch=int(provider["htp_arch"]) if "htp_arch" in provider else None,
                           versions=library_versions(), outputs=[o.name for o in lazy.model.graph.output],
                           warnings=[*prepared.warnings, *lowered,
                                     f"captured in {len(units)} marked sessions (one per unit: a decoder layer or the "
                                     f"ops between layers), each fed the marked units before it, after the unmarked "
                                     f"model ran in {len(pieces)} pieces: the model does not fit one session within "
                                     f"the memory budget"])
        request = {"job": "chunked_chain", "force": True, "record": record.model_dump(mode="json"),
                   "options": provider, "disabled_optimizers": disabled, "pieces": pieces, "units": units,
                   "external_dir": str(lazy.base), "outputs": record.outputs,
                   "plan": [list(astuple(p)) for p in capture_plan(lazy.model)]}
        return run_capture_worker(WORKER, request, run_dir, prepared.arrays, log_name="htp_chunked_worker.log",
                                  what="HTP simulator chunked run", timeout=timeout, progress=progress)
