"""Values at the fp16 rail that nothing downstream feels: masked attention gives the right verdict whatever mask
the exporter wrote (an additive -65504 / -1e4 / -1e9 / float lowest / -inf, a bool mask through Where, a causal
mask built in the graph), on VL-shaped decoders and vision encoders of several widths, healthy (``ok``) and with
one fault after the first mask Add (a rotary layout fault, a dropped add) that compare must still name with its
pattern, from a plain ``.npz`` dump with ONNX names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from qnn_debug.compare.pipeline import compare_paths
from rail_cases import MASKS, Graph, run_case
from vl_graphs import LARGER_D, LARGER_V, TINY_D, TINY_V, DecoderSizes

TINY = [Graph("tiny decoder", "llm", replace(TINY_D, layer_tables=True)),
        Graph("tiny vision encoder", "visual", replace(TINY_V, block_tables=True))]
OTHERS = [Graph("larger decoder", "llm", replace(LARGER_D, layer_tables=True), fault_block=2),
          Graph("larger vision encoder", "visual", replace(LARGER_V, block_tables=True), fault_block=2),
          Graph("wide decoder", "llm", DecoderSizes(hidden=96, heads=2, layers=3, tokens=20, deepstack=2,
                                                    sections=(8, 8, 8), layer_tables=True), fault_block=2)]


def _cases(graphs: list[Graph], masks: list[tuple[str, str, float]], *marks: pytest.MarkDecorator) -> list[object]:
    out: list[object] = []
    for g in graphs:
        for label, kind, fill in masks:
            out.append(pytest.param(g, kind, fill, None, None, "none", id=f"{g.label}-{label}-healthy", marks=marks))
            for fault, op, pattern in g.faults():
                out.append(pytest.param(g, kind, fill, fault, op, pattern, id=f"{g.label}-{label}-{fault}",
                                        marks=marks))
    return out


# every mask on the tiny decoder and vision encoder; fp16's lowest (the case that went wrong) on the three wider
# graphs by default, their other masks with the scale runs (all 105 cases pass: see the module's numbers)
@pytest.mark.parametrize(("graph", "kind", "fill", "fault", "op", "pattern"),
                         _cases(TINY, MASKS) + _cases(OTHERS, MASKS[:1])
                         + _cases(OTHERS, MASKS[1:], pytest.mark.scale))
def test_compare_names_the_real_fault_whatever_the_mask(tmp_path: Path, graph: Graph, kind: str, fill: float,
                                                        fault: str | None, op: str | None, pattern: str) -> None:
    r = run_case(tmp_path, graph, kind, fill, fault)
    v = r.verdict
    if fault is None:
        assert v.kind == "ok", v.summary
        assert r.first_failing is None
    else:
        assert (v.kind, v.pattern) == ("real_bug", pattern), v.summary
        assert r.first_failing is not None and r.first_failing.op == op, v.summary
    assert v.pattern != "fp16_range" and "not fp16-safe" not in v.summary.lower(), v.summary
    if pattern == "rotary_layout" and graph.which == "llm":  # the M-RoPE layout is named, not only "rotary"
        assert "M-RoPE sections" in v.summary and "Qwen2-VL layout" in v.summary, v.summary
    if pattern == "rotary_layout" and graph.which == "visual":
        assert "rows swapped" in v.summary, v.summary
    if pattern == "missing_op":
        assert "missing in the target" in v.summary, v.summary


def test_rail_tensors_are_marked_harmless_in_table_evidence_and_baseline(tmp_path: Path) -> None:
    graph = TINY[0]
    r = run_case(tmp_path, graph, "additive", -65504.0, None)
    notes = r.verdict.evidence.get("rail_harmless") or []
    assert [n["tensor"] for n in notes] == [f"/layers.{i}/self_attn/Add_output_0" for i in range(TINY_D.layers)]
    assert all(n["absorbed_by"][0]["op_type"] == "Softmax" for n in notes)
    assert "at its floor" in notes[0]["note"]
    rows = {t.name: t for t in r.tensors}
    row = rows["/layers.0/self_attn/Add_output_0"]
    assert row.note is not None and row.note.startswith("at the rail, harmless") and "Softmax" in row.note
    assert row.status != "bad"
    # the baseline lists the tensor beyond 65504 but says it does not make the model unsafe
    report = json.loads((tmp_path / "base" / "baseline.json").read_text())
    ranges = report["ranges"]
    assert ranges["unsafe_count"] == 0 and ranges["harmless_count"] == TINY_D.layers
    assert all(e["harmless"].startswith("at the rail, harmless") for e in ranges["unsafe"])
    assert "fp16-safe" not in report["sentence"]
    # the report's table says why a tensor at 0 dB excess that leaves 65504 is not the answer
    again = compare_paths(tmp_path / "base", tmp_path / "dump.npz", report_dir=tmp_path / "report")
    md = Path(again.report_files["markdown"]).read_text()
    assert "| ok (at the rail, harmless) |" in md and "At the fp16 rail but harmless (2)" in md


def test_a_mask_fill_in_the_inputs_is_harmless_in_the_baseline(tmp_path: Path) -> None:
    r = run_case(tmp_path, TINY[1], "additive", float(np.finfo(np.float32).min), None)
    report = json.loads((tmp_path / "base" / "baseline.json").read_text())
    entry = next(e for e in report["ranges"]["unsafe"] if e["tensor"] == "attention_mask")
    assert entry["harmless"] is not None and "Softmax" in entry["harmless"]
    assert report["ranges"]["unsafe_count"] == 0
    assert any(n["tensor"] == "attention_mask" for n in r.verdict.evidence.get("rail_harmless") or [])


def test_a_softmax_input_that_really_overflows_is_still_a_finding_with_shift_advice(tmp_path: Path) -> None:
    """Logits scaled past 65504 where the Softmax is not saturated: clipping changes its output, so it stays
    precision/fp16_range; the advice says shift (Softmax is shift-invariant), never a scale-invariant Softmax,
    and no "sum of N squares" for a Mul."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from doubles.htp_like import htp_like_dump

    x = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(1, 64) + 1.0
    nodes = [helper.make_node("Mul", ["x", "k"], ["logits"], name="scale"),
             helper.make_node("Softmax", ["logits"], ["p"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 64])],
                          [numpy_helper.from_array(np.array(1.0e5, np.float32), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=x)
    from typer.testing import CliRunner

    from qnn_debug.cli import app

    res = CliRunner().invoke(app, ["baseline", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                   "--out", str(tmp_path / "base"), "--no-mnn-gate", "--json"])
    assert res.exit_code == 0, res.output
    np.savez(tmp_path / "dump.npz", **htp_like_dump(m, {"x": x}))
    r = compare_paths(tmp_path / "base", tmp_path / "dump.npz")
    assert (r.verdict.kind, r.verdict.pattern) == ("precision", "fp16_range"), r.verdict.summary
    assert r.first_failing is not None and r.first_failing.op == "scale"
    ev = r.verdict.evidence["fp16_range"]
    assert ev["shift_invariant"] == "Softmax input" and ev["scale_invariant"] is None
    steps = " ".join(s.why for s in r.next_steps)
    assert "shift-invariant" in steps and "scale-invariant Softmax" not in steps
    assert "squares" not in steps


def test_blame_follows_the_data_flow_not_the_position(tmp_path: Path) -> None:
    """A real overflow (an L2-norm of raw pixels: its sum of squares leaves the range) and, later in execution order
    but on a branch that never reads it, a wrong op (a scale of 0.5 where the model has 2): the wrong op is a fault
    of its own, not "inherited from the overflow upstream"."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from typer.testing import CliRunner

    from doubles.htp_like import htp_like_dump
    from qnn_debug.cli import app

    def model(k: float) -> onnx.ModelProto:
        nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="sq"),
                 helper.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], name="sumsq", keepdims=1),
                 helper.make_node("Sqrt", ["sumsq"], ["norm"], name="norm"),
                 helper.make_node("Div", ["x", "norm"], ["a"], name="l2"),
                 helper.make_node("Mul", ["x", "k"], ["scaled"], name="branch_scale"),
                 helper.make_node("Tanh", ["scaled"], ["b"], name="branch_tanh")]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 256]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 256])],
                              [numpy_helper.from_array(np.asarray([1], np.int64), "axes"),
                               numpy_helper.from_array(np.asarray(k, np.float32), "k")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    x = (np.random.default_rng(0).uniform(0, 255, (1, 256)) * np.float32(1)).astype(np.float32)
    onnx.save(model(2.0 / 255), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=x)
    res = CliRunner().invoke(app, ["baseline", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
                                   "--out", str(tmp_path / "base"), "--no-mnn-gate", "--json"])
    assert res.exit_code == 0, res.output
    np.savez(tmp_path / "dump.npz", **htp_like_dump(model(0.5 / 255), {"x": x}))
    r = compare_paths(tmp_path / "base", tmp_path / "dump.npz")
    assert r.verdict.kind == "real_bug", r.verdict.summary
    assert r.first_failing is not None and r.first_failing.op == "branch_scale"
    assert "follows from the overflow" not in json.dumps(r.verdict.evidence)
    assert r.verdict.evidence["also_fp16_range"]["op"] == "sumsq"  # the overflow stays in view
