"""A baseline (fp32 reference + fp16 floor) of a model too large to hold, written one unit (decoder layer) at a time.

Why: ``bisect`` and ``diagnose`` judge tensors against a baseline; the ordinary one marks every tensor of the
whole model in one ONNX Runtime session (the 0.6B-width decoder: 19 GB). Here the model is opened without its
weights, each unit of :func:`.pieces.plan_chain` runs on ORT CPU fed the values the units before it left at
its boundary (the reference chain from the reference's values, the floor chain — every tensor rounded through
fp16 — from the floor's), its tensors are written to the run store as they come, and a value is dropped once no
later op reads it. The result is an ordinary baseline directory. The MNN CPU gate is not run (it would convert
and load the whole model); the report says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..baseline import BaselineReport, GateReport, finish_baseline, prepare_baseline_dir
from ..progress import NULL_PROGRESS, Progress, eta
from ..runstore import FLOOR_DIR, INPUTS_FILE, REFERENCE_DIR, RunRecord, RunWriter, sha256_file
from .external import LazyModel, open_lazy, run_cpu
from .pieces import Chain, plan_chain, shape_of, unit_name

BOUNDARY_SHAPES = "boundary_shapes"  # reference run extra: {tensor: [dims, elem type]} between units
GATE_NOTE = ("not run: the model streams from its external data (it does not fit one session within the memory "
             "budget), and MNN's converter would load all of it")


@dataclass
class Streamed:
    """The fixed-shape model (no weights), its chain, the inputs and every boundary tensor's shape."""

    lazy: LazyModel
    chain: Chain
    feeds: dict[str, np.ndarray]
    shapes: dict[str, tuple[list[int], int]]


HIDDEN_INPUTS = ("input_ids", "inputs_embeds")  # llmexport feeds the embeddings as input_ids [seq, 1, hidden]


def hidden_bytes(feeds: dict[str, np.ndarray]) -> int:
    """The bytes of what flows between layers: an LLM's float embeddings input when it has one, else the largest
    graph input. Not the largest input of a VL decoder: ``deepstack_embeds`` stacks three hidden states and is
    added to three layers only (taking it sized every unit of Qwen3-VL-2B's decoder 1.1 GiB too large at 291 tokens)."""
    for name in HIDDEN_INPUTS:
        value = feeds.get(name)
        if value is not None and np.asarray(value).dtype.kind == "f":
            return int(np.asarray(value).nbytes)
    return max((np.asarray(v).nbytes for v in feeds.values()), default=0)


def stream_baseline(model: Path, out: Path, *, inputs: Path | None, shapes: dict[str, list[int]] | None, seed: int,
                    budget: int, force: bool = False, progress: Progress = NULL_PROGRESS) -> Streamed:
    """Write the baseline of ``model`` into ``out`` unit by unit; returns the cut the target side reuses."""
    from ..inputs import fix_input_shapes, prepare_inputs, save_npz
    from ..onnx_graph import FP16_MAX, graph_inputs, tensor_elem_types
    from ..targets.onnx_capture import capture_plan, model_info, write_plan
    from ..versions import library_versions

    opened = open_lazy(model)
    prepared = prepare_inputs(graph_inputs(opened.model), inputs=inputs, shapes=shapes or None, seed=seed)
    lazy = LazyModel(opened.path, fix_input_shapes(opened.model, prepared.shapes), opened.base)
    chain = plan_chain(lazy.model, budget, hidden_bytes(prepared.arrays))
    out_dir = prepare_baseline_dir(out, force)
    save_npz(out_dir / INPUTS_FILE, prepared.arrays)
    plan = capture_plan(lazy.model)
    types = tensor_elem_types(lazy.model)
    info = model_info(model, lazy.model)
    outputs = [o.name for o in lazy.model.graph.output]
    note = f"computed one unit at a time ({len(chain.units)} units): the model streams from its external data"
    ref_record = RunRecord(
        role="reference", target="ort-cpu", precision="fp32", model=info, inputs=prepared.info,
        versions=library_versions(), warnings=list(prepared.warnings), outputs=outputs,
        extra={"graph_optimization": "default", "streamed": note})
    ref = RunWriter(out_dir / REFERENCE_DIR, ref_record)
    rounded = {k: (np.clip(v, -FP16_MAX, FP16_MAX).astype(np.float16).astype(v.dtype) if v.dtype == np.float32 else v)
               for k, v in prepared.arrays.items()}
    floor = RunWriter(out_dir / FLOOR_DIR, RunRecord(
        role="fp16_floor", target="fp16-floor", precision="fp16", model=info, inputs=prepared.info,
        versions=library_versions(), warnings=list(prepared.warnings), outputs=outputs,
        extra={"floor": "fp16 storage, fp32 compute; clipped to ±65504 like HTP; float weights with |w| <= 65504 "
                        "rounded", "streamed": note}))
    inputs_plan = [p for p in plan if p.kind == "input"]
    write_plan(ref, inputs_plan, {}, prepared.arrays)
    write_plan(floor, inputs_plan, {}, rounded)
    by_pos: dict[int, list[Any]] = {}
    for p in plan:
        if p.kind != "input":
            by_pos.setdefault(p.position, []).append(p)
    last_use = _last_use(lazy.model)
    shape_map = {n: shape_of(v, types.get(n)) for n, v in prepared.arrays.items()}
    ref_values: dict[str, Any] = dict(prepared.arrays)
    floor_values: dict[str, Any] = dict(rounded)
    started = time.monotonic()
    from .cut import block_model

    with progress.stage("reference: units", total=len(chain.units),
                        message="CPU reference and fp16 floor, one unit at a time") as advance:
        for k, unit in enumerate(chain.units):
            sub = block_model(lazy.model, unit, shape_map)
            mine = [p for pos in unit.positions for p in by_pos.get(pos, [])]
            names = list(dict.fromkeys([p.name for p in mine] + list(unit.outputs)))
            got = run_cpu(sub, lazy.base, ref_values, names)
            write_plan(ref, mine, got, {})
            fsub, rounded = floor_model(sub, lazy.base)
            del sub
            fgot = run_cpu(fsub, lazy.base, floor_values, names, optimize=False, initializers=rounded)
            del fsub, rounded
            write_plan(floor, mine, fgot, {})
            for name in unit.outputs:
                ref_values[name], floor_values[name] = got[name], fgot[name]
                shape_map[name] = shape_of(got[name], types.get(name))
            del got, fgot
            end = unit.positions[-1]
            for name in [n for n in ref_values if last_use.get(n, -1) <= end]:
                del ref_values[name]
                floor_values.pop(name, None)
            advance(message=eta(f"reference {unit_name(unit)}", k + 1, len(chain.units), started))
    ref_record.extra[BOUNDARY_SHAPES] = {n: [dims, elem] for n, (dims, elem) in shape_map.items()}
    ref.finish()
    floor.finish()
    report = BaselineReport(
        model=str(Path(model).resolve()), model_format="onnx", model_sha256=sha256_file(Path(model)),
        reference="ort-cpu", qdq_model=False, inputs=prepared.info, trusted=False,
        sentence=("Not verified: the MNN CPU gate was not run (the model streams from its external data), so "
                  "nothing independent confirms the ONNX Runtime reference."),
        gate=GateReport(status="skipped", note=GATE_NOTE), floor="built",
        runs={"reference": REFERENCE_DIR, "fp16_floor": FLOOR_DIR})
    finish_baseline(out_dir, report, progress)
    return Streamed(lazy, chain, prepared.arrays, shape_map)


BIG_WEIGHT = 64 << 20


def floor_model(sub: Any, base: Path) -> tuple[Any, dict[str, np.ndarray]]:
    """The fp16 floor of one unit, and its large weights rounded here (a chunk at a time) to be handed to the
    session in place: rounded in the graph (Abs, LessOrEqual, two Casts, Where), a 1.2 GB LM head held six copies
    of itself at once (6.4 GiB peak at 1.7B width)."""
    from onnx import TensorProto

    from ..onnx_graph import FLOOR_SUFFIX, fp16_floor
    from .external import _info, rounded_weight

    big = [t for t in sub.graph.initializer if t.data_type == TensorProto.FLOAT
           and t.data_location == TensorProto.EXTERNAL and _info(t)[2] >= BIG_WEIGHT]
    floor = fp16_floor(sub)
    if not big:
        return floor, {}
    renamed = {f"{t.name}{FLOOR_SUFFIX}_w": t.name for t in big}
    made = {f"{new}{tail}" for new in renamed for tail in ("_abs", "_fits", "_half", "_round", "")}
    keep = [n for n in floor.graph.node if not set(n.output) & made]
    for n in keep:
        for i, name in enumerate(n.input):
            if name in renamed:
                n.input[i] = renamed[name]
    del floor.graph.node[:]
    floor.graph.node.extend(keep)
    return floor, {t.name: rounded_weight(t, base) for t in big}


def _last_use(model: Any) -> dict[str, int]:
    from .pieces import uses

    return uses(model)[0]
