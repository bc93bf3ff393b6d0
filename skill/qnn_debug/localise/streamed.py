"""Block localisation on the HTP simulator, one block (or one group within the memory budget) at a time.

What it keeps in memory, and why that is enough: both models are opened without their weights
(:mod:`qnn_debug.localise.external`); the CPU reference runs segment by segment — the ops before the first
layer (rotary tables, input transpose), each block, the head — fed the values the earlier segments left at
their boundaries, so only boundary tensors (the 0.5 MB hidden state, cos/sin, the mask) outlive their
segment; each group of blocks (sized by :mod:`.budget`) becomes one side-by-side stage whose model points
into the original data file (no copy of the weights) and whose fp16 floor runs a few blocks' weights at a
time (small weights rounded inside ONNX Runtime, large ones such as the LM head rounded a chunk at a time and
handed to the session in place: :func:`.stream_baseline.floor_model`). Each group (its stage, floor and
simulator session) is one job of :mod:`.block_jobs`, run one after another or at the same time on every core or
a cluster (:mod:`qnn_debug.parallel`). The bad block's inner tensors are recomputed from
its boundary values when it is searched op by op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import BadInputError
from ..progress import Progress, eta
from .bisect import RangeFinding, first_out_of_range
from .budget import check_main, default_budget
from .cut import Block, block, block_model, decoder_layers, positions_block
from .external import LazyModel, materialise, open_lazy, run_cpu, tensor_sizes, weight_bytes
from .segments import chain
from .side_by_side import Feeders, side_by_side


@dataclass
class StreamedCut:
    """Both models' blocks and the reference values at every segment boundary (nothing inside a block)."""

    target: LazyModel
    reference: LazyModel
    ref_blocks: list[Block]
    tgt_blocks: list[Block]
    judged: list[str]
    values: dict[str, Any]
    types: dict[str, int]
    shapes: dict[str, tuple[list[int], int]]
    outs_per_block: list[list[str]]
    fp16_range: RangeFinding | None
    op_types: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)
    missing: list[list[str]] = field(default_factory=list)  # per segment: reference outputs the target never makes
    notes: list[str] = field(default_factory=list)  # what reading the inputs said (a tensor dump given as inputs)

    @property
    def sent(self) -> list[int]:
        """The segments the target runs: those with at least one output the target makes too."""
        return [k for k, outs in enumerate(self.outs_per_block) if outs and self.tgt_blocks[k].positions]


def _elem(value: Any, known: int | None) -> int:
    from onnx import helper

    return known or int(helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype))


def cut_streamed(request: Any, progress: Progress) -> StreamedCut:
    """Open both models without weights, cut them into blocks, and run the reference segment by segment."""
    from ..onnx_graph import tensor_elem_types
    from ..targets.onnx_capture import capture_plan

    t0 = time.monotonic()
    target = open_lazy(request.model)
    reference = open_lazy(request.reference_model or request.model) if request.reference_model else target
    layers = sorted(decoder_layers(reference.model))
    if not layers:
        raise BadInputError("the model has no decoder layers: no layer index in its node names (/layers.N/ or "
                            "/blocks.N/) and no repeated attention between residual adds",
                            hint="block localisation needs an LLM export; use `qnn-debug bisect` for other models")
    feeds, notes = vl_or_prepared(reference.model, request)
    spans = [(layers[i], layers[min(i + request.layers_per_block, len(layers)) - 1])
             for i in range(0, len(layers), request.layers_per_block)]
    ref_layers = [block(reference.model, a, b) for a, b in spans]
    tgt_layers = [block(target.model, a, b) for a, b in spans] if target is not reference else ref_layers
    plan = [p for p in capture_plan(reference.model) if p.kind != "input"]
    types = tensor_elem_types(reference.model)
    ref_chain = chain(reference.model, ref_layers)
    tgt_chain = chain(target.model, tgt_layers) if target is not reference else ref_chain
    keep = [k for k, seg in enumerate(ref_chain) if seg.positions]
    ref_blocks, tgt_blocks = [ref_chain[k] for k in keep], [tgt_chain[k] for k in keep]
    segs = ref_blocks
    check_main([_weights_of(reference.model, s.positions) for s in segs], [_seg_name(s) for s in segs],
               request.max_memory or default_budget())
    timings = {"open_s": round(time.monotonic() - t0, 3)}

    t0 = time.monotonic()
    values: dict[str, Any] = dict(feeds)
    shapes = {n: (list(np.asarray(v).shape), _elem(v, types.get(n))) for n, v in feeds.items()}
    rng: RangeFinding | None = None
    by_pos = {p.position: p for p in plan}
    started = time.monotonic()
    with progress.stage("reference: blocks", total=len(segs), message="CPU reference, one block at a time") as advance:
        for k, seg in enumerate(segs):
            sub = block_model(reference.model, seg, shapes)
            inside = [by_pos[p] for p in seg.positions if p in by_pos]
            names = list(dict.fromkeys([p.name for p in inside] + list(seg.outputs)))
            got = run_cpu(sub, reference.base, values, names)
            if rng is None:
                rng = first_out_of_range((p.name, p.op, p.op_type, p.position, got[p.name]) for p in inside
                                         if p.name in got and np.asarray(got[p.name]).dtype.kind == "f")
            for name in seg.outputs:
                values[name] = got[name]
                shapes[name] = (list(np.asarray(got[name]).shape), _elem(got[name], types.get(name)))
            del got, sub
            advance(message=eta(f"reference {_seg_name(seg)}", k + 1, len(segs), started))
    _fill_target_reads(reference, target, tgt_blocks, values, shapes, types)
    timings["reference_s"] = round(time.monotonic() - t0, 3)
    target_made = {o for n in target.model.graph.node for o in n.output}
    outs_per_block = [[o for o in rb.outputs if o in target_made] for rb in ref_blocks]
    # a result the target never makes counts where a block of layers or the graph's caller would read it (the op
    # dropped from the target); tensors only that op read are its consequence, not another finding
    wanted = {i for rb in ref_blocks if not rb.label for i in rb.inputs} | {o.name for o in reference.model.graph.output}
    missing = [[o for o in rb.outputs if o not in target_made and o in wanted] for rb in ref_blocks]
    op_types = {o: n.op_type for n in reference.model.graph.node for o in n.output}
    return StreamedCut(target, reference, ref_blocks, tgt_blocks, [p.name for p in plan], values, types, shapes,
                       outs_per_block, rng, op_types, timings, missing, notes)


def _fill_target_reads(reference: LazyModel, target: LazyModel, tgt_blocks: list[Block], values: dict[str, Any],
                       shapes: dict[str, tuple[list[int], int]], types: dict[str, int]) -> None:
    """Values for what a target segment reads that is no boundary of the reference: a tensor inside a reference
    block (the target's layer stops earlier, an add dropped) gets its CPU reference value; a tensor only the
    target's graph makes (ops it added outside the layers) gets what the target's graph computes on CPU from the
    reference values, so the first segment that uses it is where it shows."""
    need = list(dict.fromkeys(i for tb in tgt_blocks for i in tb.inputs if i not in values))
    for name in need:
        if name in values:
            continue
        ref_made = {o for n in reference.model.graph.node for o in n.output}
        lazy = reference if name in ref_made else target
        sub = _until_known(lazy.model, name, values, shapes)
        if sub is None:
            continue
        got = run_cpu(sub, lazy.base, values, [name])
        values[name] = got[name]
        shapes[name] = (list(np.asarray(got[name]).shape), _elem(got[name], types.get(name)))


def _until_known(model: onnx.ModelProto, name: str, known: dict[str, Any],
                 shapes: dict[str, tuple[list[int], int]]) -> onnx.ModelProto | None:
    """The ops making ``name`` back to tensors in ``known`` (or initializers), as a model fed those tensors."""
    from ..onnx_graph import nodes_in_order

    nodes = nodes_in_order(model)
    producer = {o: n.position for n in nodes for o in n.outputs}
    if name not in producer:
        return None
    keep: set[int] = set()
    stack = [name]
    while stack:
        t = stack.pop()
        p = producer.get(t)
        if t in known or p is None or p in keep:
            continue
        keep.add(p)
        stack.extend(i for i in nodes[p].inputs if i)
    seg = positions_block(model, sorted(keep), -1, -1)
    if any(i not in shapes for i in seg.inputs):
        return None
    return block_model(model, Block(-1, -1, seg.positions, seg.inputs, [name]), shapes)


def vl_or_prepared(model: onnx.ModelProto, request: Any) -> tuple[dict[str, Any], list[str]]:
    """The feeds: the user's (npz or test dir), a VL graph's as the runtime builds them, or seeded data; and what
    reading them said (a tensor dump given as inputs: only its inputs are used)."""
    from ..inputs import prepare_inputs
    from ..llm.vl_feeds import vl_feeds
    from ..onnx_graph import graph_inputs

    if request.inputs is None:
        built = vl_feeds(model, request.shapes or None, getattr(request, "image", None), request.seed)
        if built is not None:
            from ..inputs import save_npz

            prepared = prepare_inputs(graph_inputs(model), inputs=save_npz(Path(request.out) / "vl_inputs.npz", built),
                                      shapes=request.shapes or None, seed=request.seed)
            return prepared.arrays, []
    elif getattr(request, "image", None) is not None:
        raise BadInputError("give --inputs or --image, not both", hint="keep one of them")
    prepared = prepare_inputs(graph_inputs(model), inputs=request.inputs, shapes=request.shapes or None, seed=request.seed)
    return saturate_masks(prepared.arrays), list(prepared.warnings)


def saturate_masks(feeds: dict[str, Any]) -> dict[str, Any]:
    """Attention masks below fp16's range raised to -2^15: the HTP saturates them anyway (its fp16 has no inf), and
    float32's lowest (what exports and runtimes write) makes the fp16 floor of every masked score infinite, which
    would hide a mask the NPU never received (``qnn_debug.llm.vl_feeds.MASK_MIN``)."""
    from ..llm.vl_feeds import MASK_MIN

    out = dict(feeds)
    for name, v in feeds.items():
        a = np.asarray(v)
        if "mask" in name.lower() and a.dtype.kind == "f" and a.size and float(a.min()) < -65504.0:
            out[name] = np.maximum(a, np.asarray(MASK_MIN, a.dtype))
    return out


def _seg_name(seg: Block) -> str:
    return seg.name


def _weights_of(model: onnx.ModelProto, positions: list[int]) -> int:
    """Weight bytes the ops at ``positions`` read (inside the protobuf or in external data)."""
    sizes = tensor_sizes(model)
    nodes = model.graph.node
    return sum(sizes.get(n, 0) for n in {i for p in positions for i in nodes[p].input})


def stage(work: Path, tag: str, target: LazyModel, reference: LazyModel, pieces: list[list[int]],
          ref_pieces: list[list[int]], outs: list[list[str]], shapes: dict[str, tuple[list[int], int]],
          values: dict[str, Any], op_types: dict[str, str], types: dict[str, int]) -> dict[str, Any]:
    """One side-by-side stage: the target's pieces (weights left in the original file), their feeds, and the
    reference and fp16-floor values by new name (the floor run ``FLOOR_BATCH`` bytes of weights at a time)."""
    from ..inputs import save_npz
    from ..targets.sim_lowering import lower_for_simulator
    from .stream_baseline import floor_model

    model, maps = side_by_side(target.model, pieces, outs, shapes, tag="p", types=types)
    lowered = lower_for_simulator(model)  # the simulator refuses ReduceSumSquare; MNN's converter lowers it likewise
    feeds = {i.name: np.asarray(values[i.name]) for i in model.graph.input}
    reference_by_new, floor_by_new = {}, {}
    for batch in _batches(reference.model, ref_pieces):
        # the floor a few pieces at a time: each piece reads only reference values, so this equals the floor of the
        # whole stage, and no more than FLOOR_BATCH bytes of weights are loaded (by ONNX Runtime) at once
        ref_model, rmaps = side_by_side(reference.model, [ref_pieces[k] for k in batch], [outs[k] for k in batch],
                                        shapes, tag="p", types=types)
        ref_feeds = {i.name: np.asarray(values[i.name]) for i in ref_model.graph.input}
        # small weights stay in the data file and are rounded in the graph; large ones (an LM head) are rounded here a
        # chunk at a time and handed to the session in place: rounded in the graph and constant-folded, the 0.6 GB
        # head of a 0.6B-width decoder held about six copies of itself (a 5 GiB job process)
        floor_graph, rounded = floor_model(ref_model, reference.base)
        del ref_model
        floor = run_cpu(floor_graph, reference.base, ref_feeds, [o.name for o in floor_graph.graph.output],
                        optimize=False, initializers=rounded)
        del floor_graph, rounded
        for k, rmp in zip(batch, rmaps, strict=True):
            for orig, new in maps[k].items():
                reference_by_new[new] = np.asarray(values[orig])
                if orig in rmp and rmp[orig] in floor:
                    floor_by_new[new] = floor[rmp[orig]]
        del floor
    onnx.save(model, str(work / f"{tag}.onnx"))
    save_npz(work / f"{tag}_feeds.npz", feeds)
    keys = {new: f"k{i}" for i, new in enumerate(reference_by_new)}  # tensor names are not safe zip member names
    np.savez(work / f"{tag}_reference.npz", **{keys[n]: v for n, v in reference_by_new.items()})  # type: ignore[arg-type]
    np.savez(work / f"{tag}_floor.npz", **{keys[n]: v for n, v in floor_by_new.items()})  # type: ignore[arg-type]
    nodes = target.model.graph.node
    return {"model": str(work / f"{tag}.onnx"), "external_dir": str(target.base),
            "weight_bytes": weight_bytes(model), "feeds": str(work / f"{tag}_feeds.npz"),
            "reference": str(work / f"{tag}_reference.npz"), "floor": str(work / f"{tag}_floor.npz"), "keys": keys,
            "lowered": lowered,
            "pieces": [{"outputs": mp, "op_types": {o: op_types.get(o) for o in mp},
                        "op": nodes[piece[-1]].name, "op_type": nodes[piece[-1]].op_type, "position": piece[-1]}
                       for mp, piece in zip(maps, pieces, strict=True)]}


FLOOR_BATCH = 128 << 20


def _batches(model: onnx.ModelProto, pieces: list[list[int]]) -> list[list[int]]:
    """Consecutive pieces whose weights together stay under ``FLOOR_BATCH`` (a heavier piece stands alone)."""
    batches: list[list[int]] = [[]]
    used = 0
    for k, piece in enumerate(pieces):
        cost = _weights_of(model, piece)
        if batches[-1] and used + cost > FLOOR_BATCH:
            batches.append([])
            used = 0
        batches[-1].append(k)
        used += cost
    return batches


def _alone_outside(groups: list[list[int]], outside: list[bool]) -> list[list[int]]:
    """The groups with every segment of ops outside the layers split off into a group of its own."""
    out: list[list[int]] = []
    for g in groups:
        run: list[int] = []
        for i in g:
            if outside[i]:
                if run:
                    out.append(run)
                    run = []
                out.append([i])
            else:
                run.append(i)
        if run:
            out.append(run)
    return out


def save_values(cut: StreamedCut, work: Path) -> dict[str, Any]:
    """The boundary values on disk, and what the worker needs to rebuild one block's op-by-op stage."""
    keys = {n: f"v{i}" for i, n in enumerate(cut.values)}
    np.savez(work / "reference_values.npz", **{keys[n]: np.asarray(v) for n, v in cut.values.items()})  # type: ignore[arg-type]
    return {"streamed": True, "work": str(work), "target": str(cut.target.path), "reference": str(cut.reference.path),
            "values": str(work / "reference_values.npz"), "keys": keys, "types": cut.types, "judged": cut.judged,
            "blocks": [cut.tgt_blocks[k].positions for k in cut.sent],
            "ref_blocks": [cut.ref_blocks[k].positions for k in cut.sent]}


def ops_stage(job: dict[str, Any], k: int) -> dict[str, Any] | None:
    """Every op of block ``k`` side by side, fed the reference values inside the block (recomputed here from
    its boundary values on ORT CPU: only this block's tensors are ever held)."""
    target = open_lazy(job["target"])
    reference = open_lazy(job["reference"])
    stored = np.load(job["values"], allow_pickle=False)
    values: dict[str, Any] = {n: stored[key] for n, key in job["keys"].items()}
    types = {n: int(t) for n, t in job["types"].items()}
    shapes = {n: (list(v.shape), _elem(v, types.get(n))) for n, v in values.items()}
    rb = positions_block(reference.model, job["ref_blocks"][k], -1, -1)
    judged = set(job["judged"])
    from ..onnx_graph import nodes_in_order

    nodes = nodes_in_order(reference.model)
    inner = [o for p in rb.positions for o in nodes[p].outputs if o in judged]
    values.update(run_cpu(block_model(reference.model, rb, shapes), reference.base, values, inner))
    shapes.update({n: (list(np.asarray(v).shape), _elem(v, types.get(n))) for n, v in values.items()})
    known = set(values)
    op_types = {o: n.op_type for n in reference.model.graph.node for o in n.output}
    t_feeders, r_feeders = Feeders(target.model, known), Feeders(reference.model, known)
    ref_pos = {o: i for i, n in enumerate(reference.model.graph.node) for o in n.output}
    pieces, ref_pieces, piece_outs = [], [], []
    for pos in job["blocks"][k]:
        outs = [o for o in target.model.graph.node[pos].output if o in judged and o in ref_pos]
        if outs:
            pieces.append(t_feeders.piece(pos))
            ref_pieces.append(r_feeders.piece(ref_pos[outs[0]]))
            piece_outs.append(outs)
    if not pieces:
        return None
    return stage(Path(job["work"]), f"ops{k:03d}", target, reference, pieces, ref_pieces, piece_outs, shapes, values,
                 op_types, types)


def _position_ids(cut: StreamedCut) -> list[str]:
    """Multi-row integer position inputs ([2|3, S]: 2-D vision rotary, M-RoPE): a saved block declares them even
    when it only reads the rotary tables made from them, so its diagnosis can rebuild the tables' other layouts."""
    out = []
    for spec in cut.reference.model.graph.input:
        v = cut.values.get(spec.name)
        if v is not None and np.asarray(v).dtype.kind in "iu" and np.asarray(v).ndim == 2 and np.asarray(v).shape[0] in (2, 3):
            out.append(spec.name)
    return out


def save_block(cut: StreamedCut, work: Path, stem: str, k: int) -> None:
    """The failing block as standalone graphs with its weights (one block's worth), and its reference inputs."""
    from ..inputs import save_npz

    tb, rb, outs = cut.tgt_blocks[k], cut.ref_blocks[k], cut.outs_per_block[k]
    # both declare what either reads (a target block that lost an input, a mask it never reads, still takes it), so
    # one inputs file feeds the baseline of the reference block and the target's run
    both = list(dict.fromkeys([*rb.inputs, *tb.inputs, *_position_ids(cut)]))
    for lazy, b, suffix in ((cut.target, tb, ""), (cut.reference, rb, "_reference")):
        model = materialise(block_model(lazy.model, Block(b.first, b.last, b.positions, both, outs), cut.shapes),
                            lazy.base)
        onnx.save(model, str(work / f"{stem}{suffix}.onnx"))
        del model
    save_npz(work / f"{stem}_inputs.npz", {n: np.asarray(cut.values[n]) for n in both})
    save_npz(work / f"{stem}_reference_inputs.npz", {n: np.asarray(cut.values[n]) for n in both})
