"""Block localisation streams by block: weights left in the model's data file, blocks pointing into it, a budget.

Models: the sized Qwen3 builder (``qnn_debug_testkit.sized``) at two small widths, written as llmexport writes
large models (weights in ``llm.onnx.data``), with head_dim != hidden / heads as in real Qwen3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from qnn_debug.errors import BadInputError, MemoryBudgetError
from qnn_debug.localise.blocks import BlockRequest, run_blocks
from qnn_debug.localise.external import open_lazy
from qnn_debug.progress import Progress, ProgressEvent
from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder, sizes_from_hf_config
from qnn_debug_testkit.tiny_graph import GraphFaults

SMALL = Qwen3Sizes(layers=3, hidden=128, heads=4, kv_heads=2, head_dim=64, intermediate=256, vocab=600)
WIDER = Qwen3Sizes(layers=4, hidden=256, heads=8, kv_heads=4, head_dim=48, intermediate=512, vocab=800, seed=3)


def _external(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL]


@pytest.mark.parametrize(("sizes", "layer"), [(SMALL, 1), (WIDER, 2)])
def test_blocks_stream_external_data_and_find_the_rotary_at_two_widths(tmp_path: Path, sizes: Qwen3Sizes,
                                                                       layer: int) -> None:
    d = build_sized_decoder(tmp_path / "m", sizes, seq=32, faults={"rotary": GraphFaults(wrong_rotary_layer=layer)})
    data_size = Path(d.data).stat().st_size
    r = run_blocks(BlockRequest(model=Path(d.faulty["rotary"]), reference_model=Path(d.clean), inputs=Path(d.inputs),
                                out=tmp_path / "blocks"))
    assert [b.bad for b in r.blocks if not b.label] == [i == layer for i in range(sizes.layers)], r.blocks
    assert not any(b.bad for b in r.blocks if b.label)
    assert r.first_failing is not None and r.first_failing.op == f"/layers.{layer}/self_attn/rotary_q/Concat"
    work = tmp_path / "blocks" / "blocks"
    for stage in [*work.glob("blocks*.onnx"), *work.glob("ops*.onnx")]:
        model = onnx.load(str(stage), load_external_data=False)
        ext = _external(model)
        assert ext, stage  # the cut blocks keep their weights in the original file ...
        assert {e.value for t in ext for e in t.external_data if e.key == "location"} == {"llm.onnx.data"}
        assert stage.stat().st_size < data_size / 4  # ... and copy none of them
    assert not list(work.glob("*.data"))


def test_the_model_is_opened_without_its_weights(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16)
    lazy = open_lazy(d.clean)
    assert lazy.external and all(not t.raw_data for t in _external(lazy.model))
    assert sum(len(t.raw_data) for t in lazy.model.graph.initializer) < 64 * 1024


def test_a_data_file_that_does_not_belong_is_refused(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16)
    Path(d.data).write_bytes(b"\0" * 1024)  # truncated: the offsets point past its end
    with pytest.raises(BadInputError, match="points past the end"):
        open_lazy(d.clean)


def test_the_memory_budget_groups_blocks_and_refuses_a_block_that_cannot_fit(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", WIDER, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=3)})
    req = {"model": Path(d.faulty["rotary"]), "reference_model": Path(d.clean), "inputs": Path(d.inputs)}
    # room for about one block per session beside the process's own libraries: every block gets its own session
    from qnn_debug.localise.budget import PROCESS_BASE

    events: list[ProgressEvent] = []
    one = run_blocks(BlockRequest(**req, out=tmp_path / "one", max_memory=PROCESS_BASE + 20 * 1024 * 1024),
                     Progress(events.append))
    # every layer alone, and each segment of ops outside the layers (rotary tables before, the head after) alone
    outside = [b.label for b in one.blocks if b.label]
    assert outside == ["outside the layers, before layer 0", "outside the layers, after layer 3"]
    stages = WIDER.layers + len(outside)
    assert one.timings["block_groups"] == stages
    # progress per block, with elapsed and remaining time, from the simulator worker and the CPU reference
    sim = [e for e in events if e.stage == "htp-sim: blocks" and not e.finished and e.done]
    assert [e.done for e in sim] == list(range(1, stages + 1)) and all(e.total == stages for e in sim)
    assert f"layer 0 done (2/{stages})" in sim[1].message and "s elapsed, ~" in sim[0].message and "s left" in sim[0].message
    assert any(e.stage == "reference: blocks" and "reference layer 3" in e.message for e in events)
    assert one.first_failing is not None and one.first_failing.op == "/layers.3/self_attn/rotary_q/Concat"
    with pytest.raises(MemoryBudgetError) as e:
        run_blocks(BlockRequest(**req, out=tmp_path / "none", max_memory=PROCESS_BASE + 1024))
    assert "--max-memory" in (e.value.hint or "") and e.value.details["block"] == "layer 0"


def test_cli_max_memory_error_is_typed(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16)
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "localise-blocks", d.clean, "--inputs", d.inputs,
                           "--max-memory", "100M", "--out", str(tmp_path / "o"), "--json"],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["error"] == "memory_budget" and "--max-memory" in doc["hint"], doc


def test_sizes_from_a_hugging_face_config_keep_head_dim(tmp_path: Path) -> None:
    cfg = {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936, "rope_theta": 1000000,
           "rms_norm_eps": 1e-6, "max_position_embeddings": 40960}
    (tmp_path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    s = sizes_from_hf_config(tmp_path / "config.json", layers=2)
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab, s.layers) == (1024, 16, 8, 128, 3072,
                                                                                               151936, 2)
    assert abs(s.weight_bytes() - 4 * (2 * (2 * 1024 + 256 + 1024 * 128 * 48 + 3 * 1024 * 3072) + 1024
                                       + 151936 * 1024)) == 0
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 8}), encoding="utf-8")
    with pytest.raises(BadInputError, match="num_attention_heads"):
        sizes_from_hf_config(tmp_path / "bad.json")


def test_the_sized_builder_writes_one_shared_data_file_and_runs(tmp_path: Path) -> None:
    import onnxruntime as ort

    d = build_sized_decoder(tmp_path / "m", WIDER, seq=8, faults={"spike": GraphFaults(residual_spike_layer=0),
                                                                  "none": GraphFaults()})
    assert sorted(p.name for p in (tmp_path / "m").glob("*.data")) == ["llm.onnx.data"]
    data = Path(d.data).stat().st_size
    assert d.weight_bytes <= data < d.weight_bytes * 1.5  # weights once (plus the rotary tables), not per copy
    feeds = dict(np.load(d.inputs))
    outs = [ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, feeds)
            for p in (d.clean, d.faulty["spike"])]
    assert outs[0][0].shape == (1, 1, WIDER.vocab) and np.isfinite(outs[0][0]).all()
    assert not np.allclose(outs[0][0], outs[1][0])  # the spike changes the result
    # a copy without a fault is the same model: every weight (inline or in the data file) is the clean one's
    same = ort.InferenceSession(d.faulty["none"], providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(same[0], outs[0][0])


def test_the_bf16_embeddings_hold_the_rows_the_prefill_embeds(tmp_path: Path) -> None:
    sizes = Qwen3Sizes(layers=1, hidden=64, heads=2, kv_heads=1, head_dim=32, intermediate=128, vocab=9000)
    d = build_sized_decoder(tmp_path / "m", sizes, seq=24, embeddings=True)
    assert d.embeddings is not None
    raw = np.fromfile(d.embeddings, dtype=np.uint16)
    assert raw.size == sizes.vocab * sizes.hidden  # [vocab, hidden] bf16, every 4096-row chunk written
    table = (raw.astype(np.uint32) << 16).view(np.float32).reshape(sizes.vocab, sizes.hidden)
    ids = np.load(tmp_path / "m" / "prefill_token_ids.npy")
    assert ids.max() >= 4096  # rows from more than one chunk
    np.testing.assert_array_equal(table[ids], np.load(d.inputs)["input_ids"][:, 0, :])


def test_the_fp16_floor_of_weights_left_in_their_file_equals_the_floor_of_loaded_ones(tmp_path: Path) -> None:
    from qnn_debug.localise.external import run_cpu
    from qnn_debug.onnx_graph import fp16_floor, load_onnx

    d = build_sized_decoder(tmp_path / "m", SMALL, seq=8)
    loaded, lazy = load_onnx(d.clean), open_lazy(d.clean)
    big = next(t for t in loaded.graph.initializer if t.name.endswith("mlp.down_proj.weight"))
    assert big.raw_data and _external(lazy.model)  # one model holds the weights, the other only points at them
    feeds = dict(np.load(d.inputs))
    names = ["logits", "/layers.1/mlp/down_proj/MatMul_output_0"]
    in_file = run_cpu(fp16_floor(lazy.model), lazy.base, feeds, names)
    in_memory = run_cpu(fp16_floor(loaded), None, feeds, names)
    plain = run_cpu(loaded, None, feeds, names)
    for n in names:
        np.testing.assert_array_equal(in_file[n], in_memory[n])
        assert not np.array_equal(in_file[n], plain[n])  # the floor did round
