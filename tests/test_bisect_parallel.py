"""``bisect`` of a model run piece by piece, its probes fanned out through the parallel engine (an embedded Ray
cluster of 2 workers): the serial search's answer and probes, in fewer rounds; a rerun resumes from the kept
probes; a small model never starts the engine.

Models: the sized Qwen3 builder (``qnn_debug_testkit.sized``, external data as llmexport writes it) at two widths,
and MNN's llmexport ``llm.onnx`` of a random-weight toy Qwen3 (real-export tier) with its rotary's Neg removed;
``--max-memory`` low enough that the whole model does not fit one session (the chain path).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qnn_debug import api
from qnn_debug.localise.budget import PROCESS_BASE, block_cost
from qnn_debug.localise.external import open_lazy, tensor_sizes, weight_bytes
from qnn_debug.localise.pieces import plan_units
from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder
from qnn_debug_testkit.tiny_graph import GraphFaults

SMALL = Qwen3Sizes(layers=3, hidden=128, heads=4, kv_heads=2, head_dim=64, intermediate=256, vocab=600)
WIDER = Qwen3Sizes(layers=4, hidden=256, heads=8, kv_heads=4, head_dim=48, intermediate=512, vocab=800, seed=3)


@pytest.fixture(scope="module", autouse=True)
def engine() -> Any:
    yield
    import ray

    ray.shutdown()


def piece_budget(model: str, hidden_bytes: int) -> int:
    """Room for the heaviest unit (a layer, or the ops outside the layers) but not for the whole model."""
    lazy = open_lazy(model)
    sizes = tensor_sizes(lazy.model)
    nodes = lazy.model.graph.node
    units = [sum(sizes.get(i, 0) for i in {i for p in u for i in nodes[p].input}) for u in plan_units(lazy.model)]
    budget = PROCESS_BASE + int(max(block_cost(w, hidden_bytes) for w in units) * 1.05)
    assert budget < PROCESS_BASE + 2.5 * weight_bytes(lazy.model)  # the whole model would not fit
    return budget


def _both(args: dict[str, Any], out: Path) -> tuple[Any, Any]:
    serial = api.execute("bisect", {**args, "out": str(out / "serial"), "workers": 1})
    parallel = api.execute("bisect", {**args, "out": str(out / "parallel"), "workers": 2})
    return serial, parallel


def _same_answer(serial: Any, parallel: Any) -> None:
    assert serial.timings["pieces"] >= 2 and parallel.timings["pieces"] == serial.timings["pieces"]  # the chain path
    assert parallel.timings["workers"] == 2 and "workers" not in serial.timings
    assert parallel.first_failing == serial.first_failing and parallel.verdict == serial.verdict
    assert [(p.index, p.bad) for p in parallel.probes] == [(p.index, p.bad) for p in serial.probes]
    assert parallel.timings["rounds"] < serial.timings["rounds"] == len(serial.probes)
    assert [p.round for p in serial.probes] == list(range(len(serial.probes)))
    assert max(p.round for p in parallel.probes) <= parallel.timings["rounds"] - 1
    assert all(a.round <= b.round for a, b in zip(parallel.probes, parallel.probes[1:], strict=False))


@pytest.mark.parametrize(("sizes", "layer"), [(SMALL, 1), (WIDER, 2)])
def test_parallel_probes_give_the_serial_answer_in_fewer_rounds(tmp_path: Path, sizes: Qwen3Sizes, layer: int) -> None:
    d = build_sized_decoder(tmp_path / "m", sizes, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=layer)})
    args = {"model": d.faulty["rotary"], "reference_model": d.clean, "inputs": d.inputs,
            "max_memory": str(piece_budget(d.clean, 16 * sizes.hidden * 4))}
    serial, parallel = _both(args, tmp_path)
    _same_answer(serial, parallel)
    assert parallel.first_failing is not None
    assert parallel.first_failing.op == f"/layers.{layer}/self_attn/rotary_q/Concat" and parallel.verdict == "real_bug"
    kept = list((tmp_path / "parallel" / "jobs").glob("*.json"))
    assert len(kept) == parallel.timings["probes_run"]  # the chain job and every probe job, each kept
    assert (tmp_path / "parallel" / "jobs" / "boundaries.npz").is_file()


@pytest.mark.real_export
def test_parallel_probes_on_the_real_llmexport_graph(real_exports, tmp_path: Path) -> None:
    from qnn_debug_testkit import real_faults as F

    clean = F.copy_export(real_exports("qwen3", "a", "onnx"), tmp_path / "Qwen3-clean")
    bug = F.rotary_without_neg(clean, tmp_path / "Qwen3-rotary", 1)
    from qnn_debug.llm.onnx_export import prepare_model

    seq = 4  # short prefill: a layer's activations stay under the whole model's weights (the chain path is forced)
    shapes = {"input_ids": [seq, 1, 128], "attention_mask": [1, 1, seq, seq], "position_ids": [1, seq]}
    prepared = prepare_model(clean / "onnx" / "llm.onnx", shapes=shapes).model  # the graph the tools run
    args = {"model": bug.file, "reference_model": str(clean / "onnx" / "llm.onnx"), "shapes": shapes,
            "max_memory": str(piece_budget(prepared, seq * 128 * 4))}
    serial, parallel = _both(args, tmp_path)
    _same_answer(serial, parallel)
    assert parallel.first_failing is not None and parallel.first_failing.op == bug.op


def test_a_rerun_resumes_from_the_kept_probes_and_never_from_stale_ones(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=2)})
    args = {"reference_model": d.clean, "inputs": d.inputs, "out": str(tmp_path / "b"), "workers": 2, "force": True,
            "max_memory": str(piece_budget(d.clean, 16 * SMALL.hidden * 4))}
    first = api.execute("bisect", {**args, "model": d.faulty["rotary"]})
    jobs = tmp_path / "b" / "jobs"
    kept = {p.name: p.stat().st_mtime_ns for p in jobs.glob("*.json")}
    assert len(kept) == first.timings["probes_run"] >= 3
    again = api.execute("bisect", {**args, "model": d.faulty["rotary"]})
    assert {p.name: p.stat().st_mtime_ns for p in jobs.glob("*.json")} == kept  # no job ran again
    assert again.first_failing == first.first_failing and [p.index for p in again.probes] == [p.index for p in first.probes]
    clean = api.execute("bisect", {**args, "model": d.clean})  # another model: nothing of the old run is reused
    assert clean.first_failing is None and clean.verdict != "real_bug"
    assert kept["chain.json"] != (jobs / "chain.json").stat().st_mtime_ns


def test_the_cli_bisects_on_every_core_and_a_small_model_never_imports_ray(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", SMALL, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=1)})
    budget = str(piece_budget(d.clean, 16 * SMALL.hidden * 4))
    code = ("import json, sys; from qnn_debug import api; "
            f"r = api.execute('bisect', {{'model': {d.faulty['rotary']!r}, 'reference_model': {d.clean!r}, "
            f"'inputs': {d.inputs!r}, 'out': {str(tmp_path / 'auto')!r}, 'max_memory': {budget!r}}}); "
            "print(json.dumps({'ray': 'ray' in sys.modules, 'workers': r.timings.get('workers'), "
            "'op': r.first_failing.op}))")
    auto = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     timeout=300).stdout.strip().splitlines()[-1])
    assert auto == {"ray": False, "workers": None, "op": "/layers.1/self_attn/rotary_q/Concat"}  # under 256 MB: serial
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "bisect", d.faulty["rotary"], "--reference-model", d.clean,
                           "--inputs", d.inputs, "--max-memory", budget, "--workers", "2", "--out",
                           str(tmp_path / "cli"), "--json"], capture_output=True, text=True, timeout=300)
    doc = json.loads(proc.stdout)
    assert doc["timings"]["workers"] == 2 and doc["first_failing"]["op"] == "/layers.1/self_attn/rotary_q/Concat", proc.stderr
