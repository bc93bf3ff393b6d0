"""A real llmexport ONNX graph made ready for the host tools: one preparation step every model-taking tool runs.

``llmexport.py --export onnx`` writes ``onnx/llm.onnx`` (+ ``llm.onnx.data``) and, for VL models,
``onnx/visual.onnx``, with ``llm_config.json`` at the folder's top. What the tools cannot take as written:

- ``LlmExporter::FusedAttention`` (one per layer): given its meaning in standard ONNX (:mod:`.custom_ops`), in a
  graph written beside the original (``llm.qnn-debug.onnx``: same folder, so its weights stay in
  ``llm.onnx.data``; rewritten only when the original changes);
- a dynamic ``seq_len``: the prefill shape ``generate_llm_qnn.py`` builds its IO config with (``--chunk_size``
  128: ``input_ids [128, 1, hidden]``, ``attention_mask [1, 1, 128, 128]``, ``position_ids [1 | 3, 128]``,
  ``logits_index [1]``; ``deepstack_embeds [n, 128, hidden]``; the vision encoder at ``--image_sizes``
  512x512: 1024 patches), unless ``--shape input_ids=Nx1xH`` (or ``patches=Nx1536``) chooses another length;
- the inputs, when ``--inputs`` is not given: as MNN's runtime builds them (``inputs-seqN-seedS.npz`` beside the
  graph): embeddings of seeded token ids looked up in the folder's ``embeddings_bf16.bin`` (random data when it is
  missing), float32's lowest above the diagonal of the mask, positions ``0..N-1`` (M-RoPE rows with one image span
  for VL, deepstack features at its tokens), ``logits_index -1``; the vision encoder's five inputs as
  :mod:`.vl_feeds` builds them.

A decoder's ``logits_index`` input always becomes the constant it is fed (``-1``, the prefill's last token, unless
``--inputs`` holds another value), also in a graph exported with fixed shapes: the head's Slice starts there, and
QNN refuses a Slice whose start is a graph input together with everything after it. The user's inputs are then
read through a copy without that array (``<graph>.inputs-<digest>.npz`` beside the graph).

Any other graph (also an LLM graph exported with fixed shapes and no custom ops or ``logits_index``) passes through
untouched (one cheap look at its inputs and op domains).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError

CHUNK = 128  # generate_llm_qnn.py's default --chunk_size
IMAGE_SIZE = (512, 512)  # generate_llm_qnn.py's default --image_sizes
PREPARED_SUFFIX = ".qnn-debug.onnx"
PREFILL_SUFFIX = ".prefill.qnn-debug.onnx"  # logits_index folded to the constant it is fed
LOWERING_VERSION = "6"  # part of the prepared graph's key: a change here rewrites it
FOLDED_KEY = "qnn_debug.logits_index"  # the value logits_index was folded to (part of the prepared graph's key)
DECODER_INPUTS = {"input_ids", "attention_mask", "position_ids"}
VISION_INPUTS = {"patches", "position_ids", "attention_mask", "idx_tensor", "weight_tensor"}
MAX_PEEK_BYTES = 512 << 20  # graphs larger than this (weights inline) are not llmexport graphs: not parsed twice


class PreparedModel(BaseModel):
    """What a tool runs instead of what it was given (``model`` unchanged when nothing was needed)."""

    model: str
    kind: Literal["decoder", "vision", "other"] = "other"
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    inputs: str | None = None
    notes: list[str] = Field(default_factory=list)


def export_root(model: Path) -> Path | None:
    """The llmexport folder holding ``model`` (``llm_config.json`` beside it or one level up)."""
    for d in (model.parent, model.parent.parent):
        if (d / "llm_config.json").is_file():
            return d
    return None


def _llm_config(root: Path | None) -> dict[str, Any]:
    if root is None:
        return {}
    data = fs.read_json(root / "llm_config.json", what="llm_config.json", max_bytes=16 << 20)
    return data if isinstance(data, dict) else {}


def _declared(model: Any) -> dict[str, list[int | None]]:
    return {i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}


def _kind(dims: dict[str, list[int | None]]) -> Literal["decoder", "vision", "other"]:
    if set(dims) >= VISION_INPUTS:
        return "vision"
    if set(dims) >= DECODER_INPUTS and len(dims["input_ids"]) == 3:
        return "decoder"
    return "other"


def _is_npz(inputs: str | None) -> bool:
    return inputs is not None and str(inputs).endswith(".npz") and Path(inputs).is_file()


def _fed_index(inputs: str | None) -> np.ndarray | None:
    """The ``logits_index`` an ``--inputs`` .npz feeds, if it holds one (a one-element integer array); the archive
    is checked by :mod:`..npz_safe` first and only that member is read."""
    if not _is_npz(inputs):
        return None
    from ..npz_safe import open_npz

    with open_npz(str(inputs)) as z:
        if "logits_index" not in z.files:
            return None
        value = np.asarray(z["logits_index"])
    if value.size != 1 or value.dtype.kind not in "iu":
        raise BadInputError(f"logits_index in {Path(str(inputs)).name} is {value.dtype} {list(value.shape)}; the "
                            "runtime feeds one integer (the token whose logits it wants, -1 for the last)",
                            hint="save logits_index as np.asarray([-1], np.int32) in the .npz")
    return value.reshape(1)


def _fold_value(kind: str, dims: dict[str, list[int | None]], shapes: dict[str, list[int]],
                inputs: str | None, fed: np.ndarray | None) -> np.ndarray | None:
    """The value ``logits_index`` is folded to (``fed``: what ``inputs`` holds), or None when it stays an input (not
    a decoder's, a shape asked for it with ``--shape``, or a test dir feeds every input as it is)."""
    if kind != "decoder" or "logits_index" not in dims or "logits_index" in shapes:
        return None
    if inputs is not None and not _is_npz(inputs):
        return None
    return fed if fed is not None else np.asarray([-1], np.int32)


def _seq_from(kind: str, shapes: dict[str, list[int]], inputs: str | None) -> int | None:
    key = "patches" if kind == "vision" else "input_ids"
    if shapes.get(key):
        return int(shapes[key][0])
    if inputs is not None and _is_npz(inputs):
        with fs.open_read(inputs, what="--inputs") as f, np.load(f, allow_pickle=False) as z:
            if key in z.files:
                return int(z[key].shape[0])
    return None


def prepare_model(model: str | Path, *, shapes: dict[str, list[int]] | None = None, inputs: str | None = None,
                  seed: int = 0, image: str | None = None) -> PreparedModel:
    """``model`` as the tools can run it (see the module docstring); typed errors for what cannot be read."""
    from ..onnx_graph import load_onnx

    path = Path(model)
    if path.suffix != ".onnx" or not path.is_file():
        return PreparedModel(model=str(model))
    root = export_root(path)
    if root is None and fs.size(path, what="model file") > MAX_PEEK_BYTES:
        return PreparedModel(model=str(model))
    graph = load_onnx(path, load_external_data=False)
    dims = _declared(graph)
    kind = _kind(dims)
    from .custom_ops import custom_nodes

    custom = custom_nodes(graph)
    dynamic = any(d is None for v in dims.values() for d in v)
    shapes = dict(shapes or {})
    fed = _fed_index(inputs) if kind == "decoder" and "logits_index" in dims else None
    fold = _fold_value(kind, dims, shapes, inputs, fed)
    if not custom and fold is None and (kind == "other" or not dynamic):
        return PreparedModel(model=str(model))  # a graph made for fixed shapes is the user's to feed
    cfg = _llm_config(root)
    seq = _seq_from(kind, shapes, inputs)
    if kind == "vision":
        seq = seq or _vision_seq(IMAGE_SIZE)
    seq = seq or CHUNK
    notes: list[str] = []
    run_path = path
    if custom or fold is not None or (kind == "decoder" and "deepstack_embeds" in dims and dynamic):
        run_path, notes = _standard_graph(path, graph, cfg, seq, kind, fold, dynamic)
    fed_inputs = None
    if fold is not None:
        dims.pop("logits_index")
        if fed is not None:
            fed_inputs = _inputs_without_index(str(inputs), run_path)
    if kind == "other" or not dynamic:  # fixed shapes: the user's inputs (or seeded ones) as they are
        return PreparedModel(model=str(run_path), inputs=fed_inputs, notes=notes)
    hidden = _hidden(dims, cfg)
    want = _shapes(kind, dims, seq, hidden)
    for name, shape in want.items():
        shapes.setdefault(name, shape)
    made = None
    if inputs is None and not (kind == "vision" and image is not None):
        feeds = (_vision_feeds(graph, shapes, seed) if kind == "vision"
                 else decoder_feeds(dims, shapes, seq, hidden, root, cfg, seed))
        from ..inputs import save_npz

        made = str(save_npz(run_path.parent / f"{run_path.name.removesuffix('.onnx')}.inputs-seq{seq}-seed{seed}.npz",
                            feeds))
        notes.append(f"inputs built as MNN's runtime builds them ({seq} tokens; {Path(made).name})")
    return PreparedModel(model=str(run_path), kind=kind, shapes={k: v for k, v in shapes.items() if k in dims},
                         inputs=made or fed_inputs, notes=notes)


def _inputs_without_index(inputs: str, run_path: Path) -> str:
    """The user's ``--inputs`` without ``logits_index`` (folded into the graph), beside the graph run; keyed by the
    file's bytes so a changed .npz is copied again."""
    from ..inputs import save_npz
    from ..npz_safe import load_npz

    key = _digest(Path(inputs), what="--inputs")[:12]
    out = run_path.parent / f"{run_path.name.removesuffix('.onnx')}.inputs-{key}.npz"
    if not out.is_file():
        save_npz(out, {k: v for k, v in load_npz(inputs).items() if k != "logits_index"})
    return str(out)


def prepared_path(model: str | None) -> str | None:
    """For ``compare --model``: the standard-ONNX graph the runs were made with when ``model`` is a real llmexport
    graph that has one (tensor names of the lowered attention live there), else ``model``."""
    if model is None or not model.endswith(".onnx") or model.endswith(PREPARED_SUFFIX):
        return model
    path = Path(model)
    for suffix in (PREFILL_SUFFIX, PREPARED_SUFFIX):
        out = path.with_name(path.name.removesuffix(".onnx") + suffix)
        if _current(out, path):
            return str(out)
    return model


def _current(out: Path, path: Path, folded: str | None = None) -> bool:
    """Whether ``out`` was written from ``path`` as it is now (and, when ``folded`` is given, with that
    ``logits_index``)."""
    if out.is_file() and path.is_file():
        from ..onnx_graph import load_onnx

        want = {"qnn_debug.source_sha256": _digest(path)}
        if folded is not None:
            want[FOLDED_KEY] = folded
        props = {p.key: p.value for p in load_onnx(out, load_external_data=False).metadata_props}
        return all(props.get(k) == v for k, v in want.items())
    return False


def _hidden(dims: dict[str, list[int | None]], cfg: dict[str, Any]) -> int:
    declared = (dims.get("input_ids") or [None, None, None])[-1]
    return int(declared or cfg.get("hidden_size") or 0)


def _vision_seq(size: tuple[int, int]) -> int:
    w, h = size
    return ((round(h / 32) * 32) // 16) * ((round(w / 32) * 32) // 16)  # Qwen3-VL: 16-px patches, 2x2 merge


def _shapes(kind: str, dims: dict[str, list[int | None]], seq: int, hidden: int) -> dict[str, list[int]]:
    if kind == "vision":
        patch = (dims["patches"] + [None, None])[1] or 1536
        return {"patches": [seq, int(patch)], "position_ids": [2, seq], "attention_mask": [1, seq, seq],
                "idx_tensor": [4, seq], "weight_tensor": [4, seq]}
    out = {"input_ids": [seq, 1, hidden], "attention_mask": [1, 1, seq, seq],
           "position_ids": [int((dims["position_ids"] + [None])[0] or 1), seq]}
    if "logits_index" in dims:
        out["logits_index"] = [1]
    if "deepstack_embeds" in dims:
        out["deepstack_embeds"] = [int(dims["deepstack_embeds"][0] or 3), seq, hidden]
    return out


def _digest(path: Path, what: str = "model file") -> str:
    h = hashlib.sha256(LOWERING_VERSION.encode())
    with fs.open_read(path, what=what) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _standard_graph(path: Path, graph: Any, cfg: dict[str, Any], seq: int, kind: str,
                    fold: np.ndarray | None, dynamic: bool) -> tuple[Path, list[str]]:
    """The graph in standard ONNX beside the original (reused while the original and the folded value are
    unchanged)."""
    from .custom_ops import lower_custom_ops

    out = path.with_name(path.name.removesuffix(".onnx") + (PREFILL_SUFFIX if fold is not None else PREPARED_SUFFIX))
    folded = None if fold is None else str(int(fold.reshape(-1)[0]))
    if _current(out, path, folded):
        also = "" if folded is None else f", logits_index fixed to {folded}"
        return out, [f"{path.name} read through {out.name} (standard ONNX, written earlier from the same graph{also})"]
    digest = _digest(path)
    scale = cfg.get("attn_scale")
    notes = lower_custom_ops(graph, str(path), float(scale) if isinstance(scale, int | float) else None, seq)
    if kind == "decoder" and dynamic:
        notes += _dynamic_deepstack(graph)
    if fold is not None:
        notes += _fold_logits_index(graph, fold)
    _constants_as_initializers(graph)
    _fold_small_constants(graph)
    meta = [p for p in graph.metadata_props if p.key not in ("qnn_debug.source_sha256", FOLDED_KEY)]
    del graph.metadata_props[:]
    graph.metadata_props.extend(meta)
    entry = graph.metadata_props.add()
    entry.key, entry.value = "qnn_debug.source_sha256", digest
    if folded is not None:
        entry = graph.metadata_props.add()
        entry.key, entry.value = FOLDED_KEY, folded
    try:
        fs.atomic_write_bytes(out, graph.SerializeToString(), what="standard-ONNX copy of the graph")
    except BadInputError as e:
        raise BadInputError(f"cannot write {out.name} beside {path.name}: {e.message}",
                            hint="make the export's onnx/ folder writable (the rewritten graph reads the weights "
                                 "from llm.onnx.data beside it)") from None
    return out, [f"{path.name} read through {out.name} (written beside it; its weights stay in the original data file)",
                 *notes]


def _constants_as_initializers(graph: Any) -> None:
    """``Constant`` nodes as initializers: torch names many of them ``Constant_155`` (no layer index) between a layer's
    ops, so cutting the graph into layers and the ops between them left units of one lone constant that nothing
    outside reads, and an empty session ONNX Runtime refuses. Values and tensor names are unchanged."""
    kept = []
    for n in graph.graph.node:
        value = next((a.t for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR), None)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and value is not None and len(n.attribute) == 1:
            t = onnx.TensorProto()
            t.CopyFrom(value)
            t.name = n.output[0]
            graph.graph.initializer.append(t)
        else:
            kept.append(n)
    del graph.graph.node[:]
    graph.graph.node.extend(kept)


FOLDABLE = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Concat", "Gather", "Add", "Sub", "Mul", "Div", "Neg"}
FOLD_MAX = 4096  # elements: index and shape arithmetic only, never a weight


def _fold_small_constants(graph: Any) -> None:
    """Small ops computed from initializers alone become initializers (the Cast of the folded ``logits_index``): a
    block cut after them would otherwise be fed their value as an input, and a Slice whose start is an input is
    refused by QNN with everything after it."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    opset = [o for o in graph.opset_import if o.domain in ("", "ai.onnx")]
    inits = {t.name: t for t in graph.graph.initializer}
    small = {n for n, t in inits.items() if not t.HasField("data_location") or t.data_location != onnx.TensorProto.EXTERNAL}
    kept = []
    for n in graph.graph.node:
        ins = [i for i in n.input if i]
        if (n.op_type in FOLDABLE and n.domain in ("", "ai.onnx") and ins and all(i in small for i in ins)
                and all(int(np.prod(inits[i].dims)) <= FOLD_MAX for i in ins)):
            g = helper.make_graph([n], "fold", [], [helper.make_tensor_value_info(o, 0, None) for o in n.output],
                                  [inits[i] for i in dict.fromkeys(ins)])
            try:
                values = ReferenceEvaluator(helper.make_model(g, opset_imports=opset)).run(None, {})
            except Exception:  # the reference evaluator cannot compute it: keep the node
                kept.append(n)
                continue
            for name, v in zip(n.output, values, strict=True):
                t = numpy_helper.from_array(np.asarray(v), name)
                graph.graph.initializer.append(t)
                inits[name] = t
                small.add(name)
        else:
            kept.append(n)
    del graph.graph.node[:]
    graph.graph.node.extend(kept)


def _fold_logits_index(graph: Any, value: np.ndarray) -> list[str]:
    """``logits_index`` as the constant it is fed (-1 in a prefill: the last token's logits, as the runtime asks): a
    Slice whose start is a graph input has a data-dependent shape, which QNN refuses with everything after it."""
    from onnx import helper, numpy_helper

    declared = next(i for i in graph.graph.input if i.name == "logits_index")
    elem = declared.type.tensor_type.elem_type or onnx.TensorProto.INT32
    kept = [i for i in graph.graph.input if i.name != "logits_index"]
    del graph.graph.input[:]
    graph.graph.input.extend(kept)
    const = np.asarray(value).reshape(1).astype(helper.tensor_dtype_to_np_dtype(elem))
    graph.graph.initializer.append(numpy_helper.from_array(const, "logits_index"))
    v = int(const[0])
    said = "the prefill's last token, as the runtime asks" if v == -1 else "the value your --inputs feed"
    return [f"logits_index fixed to {v} ({said}) so the logits Slice has a constant start QNN accepts (QNN refuses "
            "a Slice that starts at a graph input, with everything after it)"]


def _dynamic_deepstack(graph: Any) -> list[str]:
    """llmexport declares ``deepstack_embeds`` ``[n, 1, hidden]`` (its trace length); the runtime feeds one row per
    token, which the graph's broadcasting Add takes: the axis is made the sequence axis."""
    for i in graph.graph.input:
        if i.name == "deepstack_embeds" and len(i.type.tensor_type.shape.dim) == 3:
            d = i.type.tensor_type.shape.dim[1]
            d.Clear()
            d.dim_param = "seq_len"
            return ["deepstack_embeds takes one row per token ([n, seq, hidden]) as MNN's runtime feeds it"]
    return []


def _token_ids(vocab: int, seq: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(min(16, vocab - 1), vocab, size=seq)


def embeddings(root: Path | None, hidden: int, ids: np.ndarray) -> np.ndarray | None:
    """Rows ``ids`` of the folder's ``embeddings_bf16.bin`` ([vocab, hidden] bfloat16) as float32, or None."""
    if root is None or not (root / "embeddings_bf16.bin").is_file() or hidden <= 0:
        return None
    path = root / "embeddings_bf16.bin"
    row = hidden * 2
    vocab = fs.size(path, what="embeddings_bf16.bin") // row
    if vocab < 2:
        return None
    ids = ids % vocab
    out = np.empty((len(ids), hidden), np.float32)
    with fs.open_read(path, what="embeddings_bf16.bin") as f:
        for k, t in enumerate(ids):
            f.seek(int(t) * row)
            raw = np.frombuffer(f.read(row), dtype=np.uint16)
            out[k] = (raw.astype(np.uint32) << 16).view(np.float32)
    return out


def decoder_feeds(dims: dict[str, list[int | None]], shapes: dict[str, list[int]], seq: int, hidden: int,
                  root: Path | None, cfg: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """The decoder's prefill inputs as MNN's runtime builds them (see the module docstring)."""
    from .vl_feeds import decoder_position_ids, image_token_span

    rng = np.random.default_rng(seed)
    emb_path_vocab = 1 << 30
    emb = embeddings(root, hidden, _token_ids(emb_path_vocab, seq, seed))
    if emb is None:
        emb = (rng.standard_normal((seq, hidden)) * 0.02).astype(np.float32)
    feeds: dict[str, np.ndarray] = {"input_ids": emb.reshape(seq, 1, hidden)}
    feeds["attention_mask"] = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), k=1)[None, None]
    rows = shapes.get("position_ids", [1, seq])[0]
    feeds["position_ids"] = (decoder_position_ids(seq) if rows == 3 else np.arange(seq, dtype=np.int32)[None]
                             ).astype(np.int32)
    if "logits_index" in dims:
        feeds["logits_index"] = np.asarray([-1], np.int32)
    if "deepstack_embeds" in dims:
        n = shapes["deepstack_embeds"][0]
        ds = np.zeros((n, seq, hidden), np.float32)
        span = image_token_span(seq)
        ds[:, span] = rng.standard_normal((n, span.stop - span.start, hidden)).astype(np.float32) * float(
            np.std(emb) or 0.02)
        feeds["deepstack_embeds"] = ds
    wanted = {i for i in dims}
    return {k: v for k, v in feeds.items() if k in wanted}


def _vision_feeds(graph: Any, shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    from .vl_feeds import vl_feeds

    feeds = vl_feeds(graph, shapes, None, seed)
    if feeds is None:  # pragma: no cover - _kind said vision
        raise BadInputError("the vision encoder's inputs cannot be built", hint="pass them with --inputs")
    mask = feeds["attention_mask"]
    feeds["attention_mask"] = np.where(mask < 0, np.finfo(np.float32).min, 0.0).astype(np.float32)
    return feeds
