"""Masked-attention cases on MNN llmexport's real ``visual.onnx`` (plain ONNX, an additive block-diagonal
``attention_mask`` the exporter fills with float32's lowest): the mask input set to each fill value an exporter
writes, healthy or with one fault injected by graph surgery that keeps tensor names (the vision rotary reading
its position rows swapped; the first attention residual Add after the first mask Add dropped)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from doubles.htp_like import htp_like_dump
from qnn_debug.cli import app
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.compare.schema import CompareResult
from qnn_debug.llm.vl_feeds import vl_feeds

PATCHES = 64  # two 4x4-token images of 2x2 merged patches: a block-diagonal mask


def feeds(model: onnx.ModelProto, fill: float) -> dict[str, np.ndarray]:
    f = vl_feeds(model, {"patches": [PATCHES, 1536], "position_ids": [2, PATCHES],
                         "attention_mask": [1, PATCHES, PATCHES], "idx_tensor": [4, PATCHES],
                         "weight_tensor": [4, PATCHES]})
    assert f is not None
    masked = f["attention_mask"] < 0
    assert masked.any() and not masked.all()
    f["attention_mask"] = np.where(masked, np.float32(fill), np.float32(0)).astype(np.float32)
    return f


def _constants(m: onnx.ModelProto) -> set[str]:
    """Initializers, Constant outputs and what Identity/Cast pass of them (the exporter shares weights that way)."""
    out = {i.name for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" or (n.op_type in ("Identity", "Cast") and all(i in out for i in n.input)):
            out.update(n.output)
    return out


def dropped_residual(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The model without the first Add after the first mask Add that sums two computed tensors where one of them
    comes from a MatMul/Gemm (the attention output projection plus its residual): its readers read the projection
    alone (the residual is lost)."""
    m = copy.deepcopy(model)
    nodes = list(m.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    consts = _constants(m)
    first_mask = next(i for i, n in enumerate(nodes) if "attention_mask" in n.input)
    first_softmax = next(i for i, n in enumerate(nodes) if n.op_type == "Softmax" and i > first_mask)

    def from_matmul(name: str) -> bool:
        p = producer.get(name)
        while p is not None and p.op_type == "Add" and any(i in consts for i in p.input):  # through a bias Add
            p = producer.get(next(i for i in p.input if i not in consts))
        return p is not None and p.op_type in ("MatMul", "Gemm")

    for i in range(first_softmax + 1, len(nodes)):
        n = nodes[i]
        if n.op_type != "Add" or any(x in consts for x in n.input):
            continue
        proj = [x for x in n.input if from_matmul(x)]
        if len(proj) == 1:
            keep = proj[0]
            for other in nodes:
                for j, x in enumerate(other.input):
                    if x == n.output[0]:
                        other.input[j] = keep
            m.graph.node.remove(n)
            return m, n.name
    raise AssertionError("no residual Add after the first Softmax")


def rows_swapped(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every reader of ``position_ids`` reads its rows as (w, h): the 2-D vision rotary's rows swapped."""
    m = copy.deepcopy(model)
    for n in m.graph.node:
        for j, x in enumerate(n.input):
            if x == "position_ids":
                n.input[j] = "position_ids.swapped"
    m.graph.initializer.append(numpy_helper.from_array(np.asarray([1, 0], np.int64), "position_ids.rows"))
    m.graph.node.insert(0, helper.make_node("Gather", ["position_ids", "position_ids.rows"], ["position_ids.swapped"],
                                            name="/rows_swapped/Gather", axis=0))
    return m


def run_real_case(tmp: Path, model_path: Path, fill: float, fault: str | None) -> tuple[CompareResult, str | None]:
    """Baseline of the export (CLI), an HTP-like dump of the faulty copy, compare from the ``.npz``; the dropped
    op's name for ``residual_dropped``."""
    tmp.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(model_path))
    f = feeds(model, fill)
    np.savez(tmp / "inputs.npz", **f)
    res = CliRunner().invoke(app, ["baseline", str(model_path), "--inputs", str(tmp / "inputs.npz"),
                                   "--out", str(tmp / "base"), "--no-mnn-gate", "--force", "--json"])
    assert res.exit_code == 0, res.output
    dropped = None
    target = model
    if fault == "residual_dropped":
        target, dropped = dropped_residual(model)
    elif fault == "rows_swapped":
        target = rows_swapped(model)
    dump = htp_like_dump(target, f)
    dump.pop("position_ids.swapped", None)
    np.savez(tmp / "dump.npz", **dump)
    return compare_paths(tmp / "base", tmp / "dump.npz"), dropped
