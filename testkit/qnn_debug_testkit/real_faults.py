"""Faults injected into MNN's real llmexport output (tests only; the product never imports this).

Each function copies an export folder (``llm.onnx`` + ``llm.onnx.data``, ``visual.onnx``, or an MNN folder)
and breaks one place of the real graph, keeping the rest byte for byte where it can: ONNX graphs are loaded
without their external data and saved beside the same ``llm.onnx.data`` (a weight edit rewrites only that
weight's bytes in the copied data file); ``llm.mnn`` is edited in MNN's converter JSON and converted back
(``qnn_debug_testkit.mnn_edit_worker``; the converter prints inline floats with six decimals, so compare a
faulted MNN folder with :func:`mnn_roundtrip` of the clean one). Every function returns a :class:`RealFault`
naming the file, the layer and the op a localiser should name.

Node names are llmexport 0.0.5's: decoder layer ``N`` is ``/blocks.N/...`` (its linears ``/layers.N/...``),
the rotary table ``/rotary/...``, VL deepstack adds ``/Add`` (after block 0), ``/Add_1``, ...; in
``visual.onnx`` vision block ``k``'s rotate-half negations are ``/Neg_{2k}`` (q) and ``/Neg_{2k+1}`` (k).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
from onnx import numpy_helper
from pydantic import BaseModel

FaultName = Literal["rotary_without_neg", "mrope_chunked", "deepstack_dropped", "mask_zeroed", "massive_activation",
                    "visual_rotary_without_neg", "mnn_rotary_without_neg", "mnn_deepstack_dropped", "index_quant",
                    "mask_dtype_config", "renamed_folder", "mnn_roundtrip", "torch_rotary_without_neg",
                    "torch_weight_scaled"]


class RealFault(BaseModel):
    """What was broken, where: the folder, the edited file, the layer and the op the tools should name."""

    fault: FaultName
    folder: str
    file: str
    layer: int | None = None
    op: str | None = None
    detail: str = ""


def copy_export(src: str | Path, dst: str | Path) -> Path:
    """A copy of an export folder (``dst`` must not exist)."""
    out = Path(dst)
    if out.exists():
        raise FileExistsError(f"{out} exists: give a new folder for the faulted copy")
    shutil.copytree(src, out)
    return out


def _llm(folder: Path, name: str = "llm.onnx") -> Path:
    path = folder / "onnx" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: pass an `--export onnx` folder")
    return path


def _load(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


def _save(model: onnx.ModelProto, path: Path) -> None:
    onnx.save(model, str(path))  # external-data references kept as they were: the copied .data file serves


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    for n in model.graph.node:
        if n.name == name:
            return n
    raise KeyError(f"no node {name!r}: is this llmexport 0.0.5's graph?")


def _bypass(model: onnx.ModelProto, name: str, keep_input: int = 0) -> onnx.NodeProto:
    """Remove node ``name``; its consumers read its input ``keep_input`` instead of its output."""
    node = _node(model, name)
    out, src = node.output[0], node.input[keep_input]
    for n in model.graph.node:
        for i, x in enumerate(n.input):
            if x == out:
                n.input[i] = src
    for o in model.graph.output:
        if o.name == out:
            raise ValueError(f"{name} feeds a graph output; bypassing it would rename the output")
    model.graph.node.remove(node)
    return node


def rotary_without_neg(src: Path, dst: Path, layer: int, *, on: Literal["q", "k"] = "q") -> RealFault:
    """rotate_half without its Neg in decoder layer ``layer`` (q or k): a numeric bug, the graph stays valid."""
    folder = copy_export(src, dst)
    path = _llm(folder)
    model = _load(path)
    neg = f"/blocks.{layer}/self_attn/Neg" + ("" if on == "q" else "_1")
    node = _bypass(model, neg)
    concat = next(n for n in model.graph.node if node.input[0] in n.input and n.op_type == "Concat")
    _save(model, path)
    return RealFault(fault="rotary_without_neg", folder=str(folder), file=str(path), layer=layer, op=concat.name,
                     detail=f"{neg} removed: {concat.name} takes the un-negated half")


def mrope_chunked(src: Path, dst: Path) -> RealFault:
    """M-RoPE frequencies taken in chunked sections (t t t … h h … w w …) instead of interleaved (t h w t h w …).

    Visible only where the three position rows differ (image tokens); text-only prompts give equal rows.
    """
    folder = copy_export(src, dst)
    path = _llm(folder)
    model = _load(path)
    gather = _node(model, "/rotary/Gather")
    const = next(n for n in model.graph.node if n.op_type == "Constant" and n.output[0] == gather.input[1])
    idx = numpy_helper.to_array(const.attribute[0].t)
    cfg = json.loads((folder / "llm_config.json").read_text(encoding="utf-8"))
    half = int(idx.size)
    rows = [int(i) // half for i in idx]  # which position row (t, h, w) each frequency reads
    counts = [rows.count(r) for r in range(3)]
    chunked = np.concatenate([np.arange(sum(counts[:r]), sum(counts[:r + 1])) + r * half for r in range(3)])
    if np.array_equal(chunked, idx):
        raise ValueError("the M-RoPE indices are already chunked: nothing to break")
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(chunked.astype(idx.dtype), const.attribute[0].t.name))
    _save(model, path)
    return RealFault(fault="mrope_chunked", folder=str(folder), file=str(path), op="/rotary/Gather",
                     detail=f"indices {idx.tolist()} -> {chunked.tolist()} (sections {counts}, is_mrope="
                            f"{cfg.get('is_mrope')})")


def deepstack_dropped(src: Path, dst: Path, layer: int = 0) -> RealFault:
    """The deepstack add after decoder layer ``layer`` removed (``/Add`` for layer 0, ``/Add_{layer}`` after)."""
    folder = copy_export(src, dst)
    path = _llm(folder)
    model = _load(path)
    name = "/Add" if layer == 0 else f"/Add_{layer}"
    node = _node(model, name)
    if not any(i.startswith("/Gather") for i in node.input):
        raise KeyError(f"{name} is not a deepstack add (inputs {list(node.input)})")
    _bypass(model, name, keep_input=0)
    gather = next(n for n in model.graph.node if n.output[0] == node.input[1])
    model.graph.node.remove(gather)
    _save(model, path)
    nxt = f"/blocks.{layer + 1}/"
    return RealFault(fault="deepstack_dropped", folder=str(folder), file=str(path), layer=layer, op=name,
                     detail=f"{name} (+ deepstack_embeds[{layer}]) removed; {nxt} reads the bare residual")


def mask_zeroed(src: Path, dst: Path, layer: int = 0) -> RealFault:
    """Layer ``layer``'s attention sees an all-zero mask (``attention_mask * 0``): it attends to later tokens.

    Pick a layer before the last: at prefill the last layer's change reaches only non-final tokens.
    """
    folder = copy_export(src, dst)
    path = _llm(folder)
    model = _load(path)
    attn = _node(model, f"/blocks.{layer}/self_attn/fused_attn/FusedAttention")
    mask_at = list(attn.input).index("attention_mask")
    zero = f"/blocks.{layer}/self_attn/mask_zero"
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), zero + "_value"))
    mul = onnx.helper.make_node("Mul", ["attention_mask", zero + "_value"], [zero + "_output_0"], name=zero)
    model.graph.node.insert(list(model.graph.node).index(attn), mul)
    attn.input[mask_at] = zero + "_output_0"
    _save(model, path)
    return RealFault(fault="mask_zeroed", folder=str(folder), file=str(path), layer=layer, op=attn.name,
                     detail=f"{zero} feeds {attn.name} a zero mask")


def _external(init: onnx.TensorProto) -> tuple[str, int, int]:
    kv = {e.key: e.value for e in init.external_data}
    return kv["location"], int(kv.get("offset", 0)), int(kv["length"])


def massive_activation(src: Path, dst: Path, layer: int, *, channels: tuple[int, ...] = (3, 17),
                       scale: float = 2.0e5) -> RealFault:
    """Layer ``layer``'s ``down_proj`` columns ``channels`` scaled by ``scale``: those residual channels grow to
    the thousands (the massive activations of real LLMs), harmless in fp32 but the next RMSNorm's ``x**2``
    passes 65504, fp16's maximum. Only that weight's bytes in the copied ``llm.onnx.data`` change."""
    folder = copy_export(src, dst)
    path = _llm(folder)
    model = _load(path)
    name = f"/layers.{layer}/mlp/down_proj/Linear_weight"
    init = next((i for i in model.graph.initializer if i.name == name), None)
    if init is None:
        raise KeyError(f"no initializer {name}")
    if init.data_location == onnx.TensorProto.EXTERNAL:
        loc, off, length = _external(init)
        data = folder / "onnx" / loc
        with data.open("r+b") as fh:
            fh.seek(off)
            w = np.frombuffer(fh.read(length), np.float32).reshape(tuple(init.dims)).copy()
            w[:, list(channels)] *= scale
            fh.seek(off)
            fh.write(w.tobytes())
    else:
        w = numpy_helper.to_array(init).copy()
        w[:, list(channels)] *= scale
        init.CopyFrom(numpy_helper.from_array(w, name))
        _save(model, path)
    nxt = f"/blocks.{layer + 1}/input_layernorm/Pow"
    return RealFault(fault="massive_activation", folder=str(folder), file=str(path), layer=layer, op=nxt,
                     detail=f"{name}[:, {list(channels)}] x {scale:g}; {nxt} squares them past 65504")


def visual_rotary_without_neg(src: Path, dst: Path, block: int) -> RealFault:
    """visual.onnx: vision block ``block``'s rotate-half on q without its Neg (``/Neg_{2*block}``)."""
    folder = copy_export(src, dst)
    path = _llm(folder, "visual.onnx")
    model = _load(path)
    neg = "/Neg" if block == 0 else f"/Neg_{2 * block}"
    node = _bypass(model, neg)
    concat = next(n for n in model.graph.node if node.input[0] in n.input and n.op_type == "Concat")
    _save(model, path)
    return RealFault(fault="visual_rotary_without_neg", folder=str(folder), file=str(path), layer=block,
                     op=concat.name, detail=f"{neg} removed from vision block {block}")


# --- MNN folders -------------------------------------------------------------------------------------------


def _edit_mnn(folder: Path, edits: list[dict[str, object]]) -> dict[str, object]:
    from qnn_debug.workers import run_worker

    model = folder / "llm.mnn"
    if not model.is_file():
        raise FileNotFoundError(f"{model} missing: pass an `--export mnn` folder")
    return run_worker("qnn_debug_testkit.mnn_edit_worker", {"model": str(model), "edits": edits}, timeout=300,
                      what="MNN converter (JSON edit)")


def mnn_roundtrip(src: Path, dst: Path) -> RealFault:
    """The clean folder through the same JSON round trip as the MNN faults (the control to compare them with)."""
    folder = copy_export(src, dst)
    _edit_mnn(folder, [])
    return RealFault(fault="mnn_roundtrip", folder=str(folder), file=str(folder / "llm.mnn"))


def mnn_rotary_without_neg(src: Path, dst: Path, layer: int) -> RealFault:
    """llm.mnn: rotate_half of layer ``layer`` (q) without its NEG UnaryOp."""
    folder = copy_export(src, dst)
    op = f"/blocks.{layer}/self_attn/Neg_output_0"
    _edit_mnn(folder, [{"bypass": op}])
    return RealFault(fault="mnn_rotary_without_neg", folder=str(folder), file=str(folder / "llm.mnn"), layer=layer,
                     op=op)


def mnn_deepstack_dropped(src: Path, dst: Path, layer: int = 0) -> RealFault:
    """llm.mnn (VL): the deepstack add after layer ``layer`` bypassed; image prompts change, text-only ones not."""
    folder = copy_export(src, dst)
    op = "/Add_output_0" if layer == 0 else f"/Add_{layer}_output_0"
    _edit_mnn(folder, [{"bypass": op}])
    return RealFault(fault="mnn_deepstack_dropped", folder=str(folder), file=str(folder / "llm.mnn"), layer=layer,
                     op=op)


def index_quant(src: Path, dst: Path) -> RealFault:
    """llm.mnn: 16-bit activation encodings on its integer index tensors (position ids, Gather indices), as
    llmexport's ``_propagate_quant_info`` spreads them in a smooth-quant export."""
    folder = copy_export(src, dst)
    result = _edit_mnn(folder, [{"index_quant": True}])
    return RealFault(fault="index_quant", folder=str(folder), file=str(folder / "llm.mnn"),
                     detail=f"{result.get('quantized')} integer tensors given an int16 encoding")


def mask_dtype_config(src: Path, dst: Path) -> RealFault:
    """llm_config.json says ``attention_mask: int`` while llm.mnn takes a float mask (the runtime and
    generate_llm_qnn.py then feed an int 0/1 mask where the graph adds a float one)."""
    folder = copy_export(src, dst)
    cfg_path = folder / "llm_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["attention_mask"] = "int"
    cfg_path.write_text(json.dumps(cfg, indent=4), encoding="utf-8")
    return RealFault(fault="mask_dtype_config", folder=str(folder), file=str(cfg_path))


def renamed_folder(src: Path, parent: Path, name: str) -> RealFault:
    """The export copied under another folder name (generate_llm_qnn.py guesses the family from the path)."""
    folder = copy_export(src, parent / name)
    return RealFault(fault="renamed_folder", folder=str(folder), file=str(folder), detail=f"renamed to {name}")


def torch_rotary_without_neg(src: Path, dst: Path, layer: int) -> RealFault:
    """A ``torch.onnx.export`` graph (one self-contained .onnx): layer ``layer``'s rotate-half on q without its
    Neg. TorchScript names it ``/…/layers.N/self_attn/Neg``; dynamo's ``node_neg_*`` carry no layer, so there
    the ``2*layer``-th Neg in graph order (q, then k, per layer) is taken."""
    model = onnx.load(str(src))
    negs = [n for n in model.graph.node if n.op_type == "Neg"]
    named = [n for n in negs if f"/layers.{layer}/" in n.name]
    neg = named[0] if named else negs[2 * layer]
    node = _bypass(model, neg.name)
    concat = next(n for n in model.graph.node if node.input[0] in n.input and n.op_type == "Concat")
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return RealFault(fault="torch_rotary_without_neg", folder=str(dst.parent), file=str(dst), layer=layer,
                     op=concat.name, detail=f"{neg.name} removed")



def torch_weight_scaled(src: Path, dst: Path, layer: int, factor: float, *, linear: str = "mlp/down_proj") -> RealFault:
    """A ``torch.onnx.export`` graph (TorchScript names) whose layer ``layer`` linear ``linear`` has its weight
    multiplied by ``factor``, in the weight's own dtype (float16 in an fp16 export): a stale or wrongly
    re-exported weight, the same graph otherwise."""
    model = onnx.load(str(src))
    op = f"/model/model/layers.{layer}/{linear}/MatMul"
    node = _node(model, op)
    inits = {i.name: i for i in model.graph.initializer}
    name = next(x for x in node.input if x in inits)
    w = numpy_helper.to_array(inits[name])
    inits[name].CopyFrom(numpy_helper.from_array((w.astype(np.float32) * factor).astype(w.dtype), name))
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return RealFault(fault="torch_weight_scaled", folder=str(dst.parent), file=str(dst), layer=layer, op=op,
                     detail=f"{name} ({w.dtype}) x {factor}")
