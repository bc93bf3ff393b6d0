"""``fix --op LayerNorm``: rescale every scale-invariant region of one kind, so the model is fp16-safe whether the
converter fuses it or not.

A decomposed LayerNorm (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div) squares its centred input; with
the massive activations of a vision encoder that square leaves fp16's range (3.8e5 measured) although the
LayerNorm's own output is small. MNN's converter fuses it into one LayerNorm op (FuseLayerNorm), so the shipped
graph never holds ``x²`` as a tensor — but a dump that marks every tensor, another converter, or an unfused run
does. Multiplying the LayerNorm's input by 2^-k and its eps by 2^-2k leaves its output unchanged
((x - m)·s / sqrt(var·s² + eps·s²) = (x - m) / sqrt(var + eps)); a power of two is exact in fp16, so nothing else
moves. The same holds for a fused ``LayerNormalization`` (its ``epsilon`` attribute scaled the same way).

Proof on this machine: the edited model's outputs equal the original's in fp32 on the baseline's inputs, and no
tensor of any rescaled LayerNorm leaves ±65504 on them.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import BadInputError
from ..runstore import INPUTS_FILE, REFERENCE_DIR
from .models import FixResult, Numbers, ProofCheck, RescaleSite

FP16_MAX = 65504.0
HEADROOM = 4.0  # the largest square lands a factor 4 below 65504
OPS = {"layernorm": "LayerNorm", "layernormalization": "LayerNorm"}


@dataclass
class Site:
    """One LayerNorm: its input, the ops inside it that read the input, and its eps (a constant or an attribute)."""

    x: str
    readers: list[str]  # node names reading ``x`` inside the LayerNorm
    eps_input: tuple[str, int] | None = None  # (node, input index) of the eps constant (decomposed)
    eps_attr: str | None = None  # node holding an ``epsilon`` attribute (fused LayerNormalization)
    tensors: list[str] = field(default_factory=list)  # the region's tensors (checked against the range)


def _const_value(m: onnx.ModelProto, name: str) -> np.ndarray | None:
    for init in m.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for n in m.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
    return None


def find_sites(m: onnx.ModelProto) -> list[Site]:
    """Every LayerNorm of the graph, fused or decomposed, from its structure (never from node names)."""
    nodes = list(m.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    sites = []
    for n in nodes:
        if n.op_type == "LayerNormalization":
            sites.append(Site(x=n.input[0], readers=[n.name], eps_attr=n.name, tensors=list(n.output)))
            continue
        if n.op_type != "Pow" or len(n.input) < 2:
            continue
        two = _const_value(m, n.input[1])
        sub = producer.get(n.input[0])
        if two is None or float(np.asarray(two).reshape(-1)[0]) != 2.0 or sub is None or sub.op_type != "Sub":
            continue
        mean = producer.get(sub.input[1])
        if mean is None or mean.op_type != "ReduceMean" or mean.input[0] != sub.input[0]:
            continue
        var = next((r for r in readers.get(n.output[0], []) if r.op_type == "ReduceMean"), None)
        add = next((r for r in readers.get(var.output[0], []) if r.op_type == "Add"), None) if var else None
        if var is None or add is None:
            continue
        k = 1 if add.input[0] == var.output[0] else 0
        if _const_value(m, add.input[k]) is None:
            continue
        sites.append(Site(x=sub.input[0], readers=[mean.name, sub.name], eps_input=(add.name, k),
                          tensors=[sub.output[0], n.output[0], var.output[0], add.output[0]]))
    return sites


def rescale(m: onnx.ModelProto, sites: list[Site], k: int) -> onnx.ModelProto:
    """The model with each site's input multiplied by 2^-k and its eps by 2^-2k (new initializers; the original
    constants are left for any other reader)."""
    out = copy.deepcopy(m)
    by_name = {n.name: n for n in out.graph.node}
    scale = np.float32(2.0 ** -k)
    out.graph.initializer.append(numpy_helper.from_array(np.asarray(scale, np.float32), "qd_rescale.factor"))
    inserted: list[tuple[int, onnx.NodeProto]] = []
    for j, site in enumerate(sites):
        scaled = f"{site.x}.qd_rescaled_{j}"
        first = min(list(out.graph.node).index(by_name[r]) for r in site.readers)
        inserted.append((first, helper.make_node("Mul", [site.x, "qd_rescale.factor"], [scaled],
                                                 name=f"qd_rescale/{j}/Mul")))
        for r in site.readers:
            node = by_name[r]
            for i, name in enumerate(node.input):
                if name == site.x:
                    node.input[i] = scaled
        if site.eps_attr is not None:
            node = by_name[site.eps_attr]
            eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
            keep = [a for a in node.attribute if a.name != "epsilon"]
            del node.attribute[:]
            node.attribute.extend([*keep, helper.make_attribute("epsilon", float(eps) * float(scale) ** 2)])
        elif site.eps_input is not None:
            node, i = by_name[site.eps_input[0]], site.eps_input[1]
            value = _const_value(out, node.input[i])
            assert value is not None
            name = f"qd_rescale.eps_{j}"
            out.graph.initializer.append(numpy_helper.from_array((value * scale * scale).astype(value.dtype), name))
            node.input[i] = name
    for pos, node in sorted(inserted, key=lambda p: -p[0]):
        out.graph.node.insert(pos, node)
    return out


def _run_all(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    from ..onnx_graph import tensor_elem_types

    mm = copy.deepcopy(m)
    types = tensor_elem_types(mm)
    have = {o.name for o in mm.graph.output}
    mm.graph.output.extend(helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None)
                           for n in mm.graph.node if n.op_type != "Constant" for o in n.output
                           if o and o not in have and types.get(o) == onnx.TensorProto.FLOAT)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # every tensor as the graph says
    sess = ort.InferenceSession(mm.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))


def _largest(values: dict[str, np.ndarray], names: list[str]) -> float:
    found = [float(np.abs(values[n][np.isfinite(values[n])]).max(initial=0.0)) for n in names if n in values]
    return max(found, default=0.0)


def fix_region_rescale(result_model: str | None, reference: str, op: str, *, verdict: str, model: str | None,
                       exponent: int | None, force: bool) -> FixResult:
    """Rescale every region ``op`` names (``LayerNorm``), write ``<model>.fp16-rescaled-layernorm.onnx`` beside the
    model and prove it on the baseline's inputs."""
    kind = OPS.get(op.strip().lower())
    if kind is None:
        raise BadInputError(f"--op {op!r} is not a scale-invariant region fix knows",
                            hint="use --op LayerNorm (each LayerNorm's input by 2^-k, its eps by 2^-2k)")
    path = Path(model or result_model or "")
    if path.suffix.lower() != ".onnx" or not path.is_file():
        raise BadInputError(f"--op needs the .onnx model to edit; {str(path) or 'none'} is not one",
                            hint="pass --model MODEL.onnx (the model the baseline was built from)")
    ref = Path(reference)
    inputs = (ref.parent if ref.name == REFERENCE_DIR else ref) / INPUTS_FILE
    if not inputs.is_file():
        raise BadInputError(f"no baseline inputs at {inputs}", hint="fix a comparison against a qnn-debug baseline")
    original = onnx.load(str(path))
    sites = find_sites(original)
    if not sites:
        raise BadInputError(f"{path.name} holds no LayerNorm (fused or decomposed) to rescale",
                            hint="the region must end in a normalisation; see the comparison's next steps")
    with np.load(inputs) as z:
        feeds = {k: np.asarray(z[k]) for k in z.files}
    before = _run_all(original, feeds)
    squares = [t for s in sites for t in s.tensors]
    top = _largest(before, squares)
    # sized on every LayerNorm on the sample (the verdict's exponent was sized on its one site: at least that)
    k = max(exponent or 1, math.ceil(math.log2(max(top * HEADROOM / FP16_MAX, 1.0)) / 2))
    fixed = rescale(original, sites, k)
    dest = path.with_name(f"{path.stem}.fp16-rescaled-layernorm.onnx")
    if dest.exists() and not force:
        raise BadInputError(f"{dest} exists", hint="pass --force to replace it (the model itself is never written)")
    tmp = dest.with_name(dest.name + ".tmp")
    onnx.save(fixed, str(tmp))
    tmp.replace(dest)
    after = _run_all(fixed, feeds)
    outs = [o.name for o in original.graph.output]
    worst = 0.0
    for o in outs:
        a, b = np.asarray(after[o], np.float64), np.asarray(before[o], np.float64)
        worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    top_after = _largest(after, squares)
    checks = [ProofCheck(name="fp32 outputs unchanged", passed=worst <= 1e-4,
                         detail=f"largest relative difference of the graph outputs {worst:.2e} (limit 1e-4)"),
              ProofCheck(name="LayerNorm regions inside fp16", passed=top_after <= FP16_MAX,
                         detail=f"largest value inside the {len(sites)} LayerNorm(s): {top:.4g} -> {top_after:.4g} "
                                f"(fp16 holds 65504) on the baseline's inputs")]
    site_models = [RescaleSite(overflow_op=s.readers[-1], overflow_tensor=s.tensors[1] if len(s.tensors) > 1
                               else s.tensors[0], source=s.x, exponent=k,
                               place="one Mul feeding the LayerNorm's readers of its input; eps x 2^-2k",
                               region=s.readers, bound_source="sample", sized_by=s.tensors[-1] if s.tensors else None,
                               sample_max=_largest(before, s.tensors), after_max=_largest(after, s.tensors))
                   for s in sites]
    proven = all(c.passed for c in checks)
    return FixResult(kind="region_rescale", verdict=verdict, artefact=str(dest), proven=proven, proof=checks,
                     sites=site_models, before=Numbers(verdict=verdict), summary=(
                         f"Rescaled {len(sites)} LayerNorm(s): each input x 2^-{k}, each eps x 2^-{2 * k}; the "
                         f"largest value inside them goes from {top:.4g} to {top_after:.4g} on the baseline's inputs, "
                         f"outputs unchanged in fp32 ({worst:.1e}); safe whether the converter fuses the LayerNorms "
                         f"(MNN's FuseLayerNorm) or not. Written to {dest.name}."),
                     not_proven=["the simulator run of the edited model: run `qnn-debug diagnose` on it"])
