"""A whole model as a chain of pieces: consecutive runs of ops, each small enough for one session.

Why: ``bisect`` and ``diagnose`` (chunked marking) look at the whole model, not one block fed reference
values, so at LLM size they need the model itself run front to back without ever holding it: the model is
opened without its weights (:mod:`.external`), cut into consecutive runs of ops (one decoder layer, or the
ops outside the layers, per *unit*; consecutive units share a piece within the memory budget,
:mod:`.budget`), and each piece is fed the values the pieces before it left at its boundary. Pieces are
saved as small ONNX files whose initializers point into the original data file; a session of a piece reads
only that piece's weights. Running the chain piece by piece computes what the whole model computes (the
boundary tensors are passed on as the target produced them), with one piece in memory at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import BadInputError
from .budget import PROCESS_BASE, SIM_FACTOR, block_cost, check_main, plan_groups
from .cut import Block, block_model, layer_of
from .external import LazyModel, tensor_sizes, weight_bytes


@dataclass
class Chain:
    """The pieces of one model in execution order, and the units (layers) each is made of."""

    pieces: list[Block]
    units: list[Block]
    unit_of_piece: list[list[int]]


def fits_whole(lazy: LazyModel, budget: int) -> bool:
    """Whether one simulator session of the whole model stays within ``budget`` (small models always do)."""
    return PROCESS_BASE + SIM_FACTOR * weight_bytes(lazy.model) <= budget


def span(model: onnx.ModelProto, positions: list[int], last_use: dict[str, int], consts: set[str],
         inits: set[str]) -> Block:
    """Ops at consecutive ``positions`` as a block: what they read from earlier ops or the graph inputs, and what
    they make that a later op (or the graph's outputs) reads."""
    nodes = model.graph.node
    made = {o for p in positions for o in nodes[p].output}
    reads = list(dict.fromkeys(i for p in positions for i in nodes[p].input
                               if i and i not in made and i not in inits and i not in consts))
    end = positions[-1]
    outs = [o for p in positions for o in nodes[p].output if o and o not in consts and last_use.get(o, -1) > end]
    layers = {layer_of(nodes[p].name) for p in positions}
    first = min((k for k in layers if k is not None), default=-1)
    last = max((k for k in layers if k is not None), default=-1)
    return Block(first, last, list(positions), reads, outs)


def uses(model: onnx.ModelProto) -> tuple[dict[str, int], set[str], set[str]]:
    from ..onnx_graph import initializer_names

    nodes = model.graph.node
    end = len(nodes)
    last_use: dict[str, int] = {}
    for p, n in enumerate(nodes):
        for i in n.input:
            if i:
                last_use[i] = p
        for a in n.attribute:  # sub-graphs read outer tensors by name
            for g in [a.g, *a.graphs]:
                for s in g.node:
                    for i in s.input:
                        if i:
                            last_use[i] = max(last_use.get(i, -1), p)
    for o in model.graph.output:
        last_use[o.name] = end
    consts = {o for n in nodes if n.op_type == "Constant" for o in n.output}
    return last_use, consts, initializer_names(model)


def plan_units(model: onnx.ModelProto, chunk: int = 48) -> list[list[int]]:
    """Consecutive positions per decoder layer (the ops between layers form their own units), at most ``chunk``
    ops per unit when the node names carry no layer."""
    nodes = model.graph.node
    layered = any(layer_of(n.name) is not None for n in nodes)
    units: list[list[int]] = []
    key: object = object()
    for p, n in enumerate(nodes):
        k = layer_of(n.name) if layered else None
        if not units or k != key or (not layered and len(units[-1]) >= chunk):
            units.append([])
        key = k
        units[-1].append(p)
    return units


def _weights(model: onnx.ModelProto, sizes: dict[str, int], positions: list[int]) -> int:
    nodes = model.graph.node
    return sum(sizes.get(n, 0) for n in {i for p in positions for i in nodes[p].input})


def plan_chain(model: onnx.ModelProto, budget: int, hidden_bytes: int, chunk: int = 48) -> Chain:
    """Units (layers) grouped into pieces whose simulator sessions fit ``budget``; a unit that cannot fit alone is
    a :class:`~qnn_debug.errors.MemoryBudgetError` (from :func:`.budget.plan_groups`); the CPU reference of the
    heaviest unit is checked against the budget too (:func:`.budget.check_main`)."""
    last_use, consts, inits = uses(model)
    positions = plan_units(model, chunk)
    units = [span(model, u, last_use, consts, inits) for u in positions]
    sizes = tensor_sizes(model)
    weights = [_weights(model, sizes, u) for u in positions]
    names = [unit_name(u) for u in units]
    check_main(weights, names, budget)
    groups = plan_groups([block_cost(w, hidden_bytes) for w in weights], budget, names)
    pieces = [span(model, [p for k in g for p in positions[k]], last_use, consts, inits) for g in groups]
    return Chain(pieces, units, groups)


def unit_name(b: Block) -> str:
    if b.first < 0:
        return f"the ops at positions {b.positions[0]}..{b.positions[-1]} (outside the layers)"
    return b.name


def piece_model(model: onnx.ModelProto, piece: Block, shapes: dict[str, tuple[list[int], int]]) -> onnx.ModelProto:
    """``piece`` as a standalone graph whose weights stay in the original data file (``shapes``: its inputs')."""
    return block_model(model, piece, shapes)


def shape_of(value: Any, known: int | None) -> tuple[list[int], int]:
    from onnx import helper

    arr = np.asarray(value)
    return list(arr.shape), known or int(helper.np_dtype_to_tensor_dtype(arr.dtype))


def save_pieces(lazy: LazyModel, chain: Chain, shapes: dict[str, tuple[list[int], int]], work: Path,
                tag: str, *, lower: bool = True) -> list[dict[str, Any]]:
    """Each piece saved as ``<tag>NNN.onnx`` (initializers pointing into the original data file), lowered for the
    simulator (ReduceSumSquare → ReduceSum(Mul)); returns what a worker needs per piece, and the lowering notes
    under ``"lowered"`` of the first entry."""
    from ..onnx_graph import static_shapes
    from ..targets.sim_lowering import lower_for_simulator

    unknown = {i for piece in chain.pieces for i in piece.inputs if i not in shapes}
    if unknown:
        # an edited copy run against the original's baseline computes tensors the original has not (a fault's own
        # ops between layers): their shapes come from the copy itself
        shapes = {**shapes, **static_shapes(lazy.model, unknown)}
    out = []
    for k, piece in enumerate(chain.pieces):
        missing = [i for i in piece.inputs if i not in shapes]
        if missing:
            raise BadInputError(f"no shape for {missing[0]!r}, read by {unit_name(piece)}: the reference's baseline "
                                "has no such tensor and ONNX shape inference cannot fix its dimensions",
                                hint="raise --max-memory, if the machine has it, so that the whole model runs in "
                                     "one simulator session and no pieces are cut")
        m = piece_model(lazy.model, piece, shapes)
        notes = lower_for_simulator(m) if lower else []
        path = work / f"{tag}{k:03d}.onnx"
        onnx.save(m, str(path))
        out.append({"model": str(path), "inputs": list(piece.inputs), "outputs": list(piece.outputs),
                    "positions": [piece.positions[0], piece.positions[-1]], "units": chain.unit_of_piece[k],
                    "lowered": notes})
    return out
