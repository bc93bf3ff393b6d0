"""Bisect, block localisation and the lying-dump fallback on the tiny Qwen3-shaped decoder (HTP simulator).

The decoder is the project's own torch-export-form builder (RMSNorm as ``Mul(x, Div(1, Sqrt))``); its
faulty copies: ``wrong_rotary`` (rotate_half without its Neg in one layer) and ``residual_spike`` (two
residual channels at 400 on the first token: their squares overflow fp16 in the next RMSNorm).
Measured here: marking every tensor of this decoder makes the HTP graph fail to finalise (QNN 1002,
MEM_ALLOC) — marking any ``Div(1, Sqrt)`` output alone is enough — while the unmarked graph runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qnn_debug.localise.bisect import BisectRequest, run_bisect
from qnn_debug.localise.blocks import BlockRequest, run_blocks
from qnn_debug_testkit.tiny_graph import (
    GraphFaults,
    TinyQwen3Config,
    build_graph,
    make_weights,
    prefill_inputs,
)

SEQ = 32


def _decoder(tmp: Path, layers: int, faults: GraphFaults, *, static_head: bool = False,
             hidden: int = 128) -> tuple[Path, Path, Path]:
    """(clean .onnx, faulty .onnx, prefill .npz); ``static_head`` bakes logits_index in (QNN rejects the dynamic Slice)."""
    cfg = TinyQwen3Config(layers=layers, hidden=hidden, intermediate=2 * hidden)
    w = make_weights(cfg)
    feeds = prefill_inputs(cfg, w, [int(i) for i in np.random.default_rng(layers).integers(0, 256, size=SEQ)])
    models = [build_graph(cfg, w, seq_len=SEQ), build_graph(cfg, w, seq_len=SEQ, faults=faults)]
    if static_head:
        index = feeds.pop("logits_index")
        for m in models:
            keep = [i for i in m.graph.input if i.name != "logits_index"]
            del m.graph.input[:]
            m.graph.input.extend(keep)
            m.graph.initializer.append(numpy_helper.from_array(index, "logits_index"))
    onnx.save(models[0], str(tmp / "llm.onnx"))
    onnx.save(models[1], str(tmp / "llm_bug.onnx"))
    np.savez(tmp / "prefill.npz", **feeds)
    return tmp / "llm.onnx", tmp / "llm_bug.onnx", tmp / "prefill.npz"


@pytest.mark.parametrize(("layers", "hidden", "fault_layer"), [(2, 128, 1), (3, 64, 0)])
def test_blocks_find_the_layer_and_op_with_the_wrong_rotary(tmp_path: Path, layers: int, hidden: int,
                                                            fault_layer: int) -> None:
    clean, bug, inputs = _decoder(tmp_path, layers, GraphFaults(wrong_rotary_layer=fault_layer), hidden=hidden)
    r = run_blocks(BlockRequest(model=bug, reference_model=clean, inputs=inputs, out=tmp_path / "blocks"))
    assert [b.bad for b in r.blocks if not b.label] == [i == fault_layer for i in range(layers)], r.blocks
    assert not any(b.bad for b in r.blocks if b.label)  # the ops outside the layers are judged too, and fine
    assert r.verdict == "real_bug" and r.first_failing is not None
    assert r.first_failing.op == f"/layers.{fault_layer}/self_attn/rotary_q/Concat"
    assert r.first_failing.evidence is not None and (r.first_failing.evidence.excess_db or 0) > 40
    assert (tmp_path / "blocks" / "blocks.json").is_file()


def test_blocks_name_the_fp16_overflow_of_the_residual_spike_not_a_bug(tmp_path: Path) -> None:
    clean, bug, inputs = _decoder(tmp_path, 2, GraphFaults(residual_spike_layer=0))
    r = run_blocks(BlockRequest(model=bug, reference_model=bug, inputs=inputs, out=tmp_path / "blocks"))
    assert r.fp16_range is not None and r.fp16_range.op == "/layers.1/input_layernorm/Pow"
    assert r.fp16_range.max_abs_ref > 65504
    assert r.first_failing is None or r.verdict != "real_bug" or "fp16 range" in r.summary
    clean_r = run_blocks(BlockRequest(model=clean, inputs=inputs, out=tmp_path / "clean"))
    assert clean_r.verdict == "ok" and clean_r.fp16_range is None  # the -3.4e38 mask fill is no range problem


def test_bisect_on_the_decoder_finds_the_wrong_rotary(tmp_path: Path) -> None:
    clean, bug, inputs = _decoder(tmp_path, 2, GraphFaults(wrong_rotary_layer=1), static_head=True)
    r = run_bisect(BisectRequest(model=bug, reference_model=clean, inputs=inputs, out=tmp_path / "b", mnn_gate=False))
    assert r.first_failing is not None and r.first_failing.op == "/layers.1/self_attn/rotary_q/Concat"
    assert len(r.probes) <= 9


def test_diagnose_does_not_trust_a_mark_all_graph_that_fails_to_finalise(tmp_path: Path) -> None:
    """The issue's case: mark-all breaks (1002 MEM_ALLOC); diagnose falls back by itself and says why."""
    from qnn_debug.diagnose import diagnose

    clean, bug, inputs = _decoder(tmp_path, 2, GraphFaults(wrong_rotary_layer=1), static_head=True)
    d = diagnose(bug, tmp_path / "diag", reference_model=clean, inputs=inputs, mnn_gate=False)
    assert d.fallback is not None and d.method == "chunked_dump"
    assert "1002" in d.fallback.full_dump_not_used and "unmarked one built" in d.fallback.full_dump_not_used
    assert d.compare is not None and d.compare.first_failing is not None
    assert d.compare.first_failing.op == "/layers.1/self_attn/rotary_q/Concat"
    assert d.compare.verdict.kind == "real_bug" and d.compare.verdict.evidence["method"] == "chunked_dump"
    assert "full dump was not used" in d.compare.verdict.summary
    from qnn_debug.runstore import load_run

    chunked = load_run(tmp_path / "diag" / "htp-sim-chunked")
    skipped = chunked.record.extra["unmarkable"]
    assert skipped and all("/Div_output_0" in n for n in skipped)  # the Div(1, Sqrt) of each RMSNorm
