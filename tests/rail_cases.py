"""Masked-attention cases for the fp16-rail rule: the small VL graphs (``vl_graphs``) with a mask written the way
an exporter writes it (an additive input of some fill value, a bool input through Where, a causal mask built in
the graph), healthy or with one fault after the first mask Add, run through baseline and a dump, then compare."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from typer.testing import CliRunner

from doubles.htp_like import htp_like_dump
from qnn_debug.cli import app
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.compare.schema import CompareResult
from qnn_debug.llm.vl_feeds import decoder_inputs, vision_inputs
from vl_graphs import DecoderSizes, VisionSizes, decoder_model, vision_model

LOWEST = float(np.finfo(np.float32).min)
# (label, mask kind, fill): additive fills from fp16's lowest to -inf, a bool mask, a causal mask built in the graph
MASKS = [("-65504", "additive", -65504.0), ("-1e4", "additive", -1e4), ("-1e9", "additive", -1e9),
         ("float lowest", "additive", LOWEST), ("-inf", "additive", float("-inf")),
         ("bool + Where", "bool", LOWEST), ("causal Trilu/Less + Where", "causal", -65504.0)]


@dataclass(frozen=True)
class Graph:
    """One VL-shaped graph: which builder, its sizes, and where its faults sit."""

    label: str
    which: str  # "visual" or "llm"
    sizes: VisionSizes | DecoderSizes
    fault_block: int = 1

    def model(self, fault: str | None, mask_kind: str, fill: float) -> onnx.ModelProto:
        if self.which == "visual":
            assert isinstance(self.sizes, VisionSizes)
            return vision_model(self.sizes, fault, mask_kind=mask_kind, fill=fill, fault_block=self.fault_block)
        assert isinstance(self.sizes, DecoderSizes)
        return decoder_model(self.sizes, fault, mask_kind=mask_kind, fill=fill, fault_block=self.fault_block)

    def feeds(self, mask_kind: str, fill: float) -> dict[str, np.ndarray]:
        s = self.sizes
        if isinstance(s, VisionSizes):
            f = vision_inputs(s.seq, 6 * s.patch * s.patch, s.side)
        else:
            f = decoder_inputs(s.tokens, s.hidden, s.deepstack)
        masked = f.pop("attention_mask") < 0
        if mask_kind == "additive":
            f["attention_mask"] = np.where(masked, np.float32(fill), np.float32(0)).astype(np.float32)
        elif mask_kind == "bool":
            f["attention_mask"] = ~masked
        return f

    # the faults after the first mask Add, with the op compare must name and its pattern
    def faults(self) -> list[tuple[str, str, str]]:
        b = self.fault_block
        if self.which == "visual":
            return [("rows_swapped_block", f"/blocks.{b}/rotary/Cast", "rotary_layout"),
                    ("residual_dropped", f"/blocks.{b}/Add", "missing_op")]
        return [("chunked_mrope_layer", f"/layers.{b}/rotary/Gather", "rotary_layout"),
                ("deepstack_dropped", "/Add_1", "missing_op")]


def run_case(tmp: Path, graph: Graph, mask_kind: str, fill: float, fault: str | None) -> CompareResult:
    """Baseline of the clean graph (CLI), a dump of the graph the target runs (fault or not), compare from the
    ``.npz`` (engine API)."""
    tmp.mkdir(parents=True, exist_ok=True)
    feeds = graph.feeds(mask_kind, fill)
    onnx.save(graph.model(None, mask_kind, fill), str(tmp / "model.onnx"))
    np.savez(tmp / "inputs.npz", **feeds)
    res = CliRunner().invoke(app, ["baseline", str(tmp / "model.onnx"), "--inputs", str(tmp / "inputs.npz"),
                                   "--out", str(tmp / "base"), "--no-mnn-gate", "--force", "--json"])
    assert res.exit_code == 0, res.output
    np.savez(tmp / "dump.npz", **htp_like_dump(graph.model(fault, mask_kind, fill), feeds))
    return compare_paths(tmp / "base", tmp / "dump.npz")
