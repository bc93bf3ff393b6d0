"""Block runs through the parallel engine on this machine (an embedded Ray cluster, one per module): the same
answer as the serial run, the memory budget bounding how many jobs run at once, and a cancel stopping them all.

Models: the sized Qwen3 builder (``qnn_debug_testkit.sized``), weights in an external data file as llmexport
writes them, with a rotary fault injected in one layer.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qnn_debug.localise.blocks import BlockRequest, run_blocks
from qnn_debug.parallel import Job
from qnn_debug.parallel.ray_engine import RayExecutor, connect
from qnn_debug.progress import Progress, ProgressEvent
from qnn_debug_testkit.held_jobs import most_at_once
from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder
from qnn_debug_testkit.tiny_graph import GraphFaults

GIB = 1 << 30
BUDGET = 2 * GIB
SIX = Qwen3Sizes(layers=6, hidden=128, heads=4, kv_heads=2, head_dim=64, intermediate=256, vocab=600)
NARROW = Qwen3Sizes(layers=4, hidden=64, heads=2, kv_heads=1, head_dim=32, intermediate=128, vocab=300, seed=5)


@pytest.fixture(scope="module", autouse=True)
def engine() -> Iterator[None]:
    """One embedded cluster for the module: 2 workers, a 2 GiB budget (the block runs below reuse it)."""
    connect(None, 2, BUDGET)
    yield
    import ray

    ray.shutdown()


def _verdicts(r: object) -> list[tuple[bool, float | None]]:
    return [(b.bad, round(b.worst.excess_db, 6) if b.worst and b.worst.excess_db is not None else None)
            for b in r.blocks]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("sizes", "layer"), [(SIX, 4), (NARROW, 1)])
def test_parallel_block_runs_give_the_serial_answer(tmp_path: Path, sizes: Qwen3Sizes, layer: int) -> None:
    d = build_sized_decoder(tmp_path / "m", sizes, seq=32, faults={"rotary": GraphFaults(wrong_rotary_layer=layer)})
    req = {"model": Path(d.faulty["rotary"]), "reference_model": Path(d.clean), "inputs": Path(d.inputs),
           "max_memory": BUDGET}
    serial = run_blocks(BlockRequest(**req, out=tmp_path / "serial", workers=1))
    events: list[ProgressEvent] = []
    parallel = run_blocks(BlockRequest(**req, out=tmp_path / "parallel", workers=2), Progress(events.append))
    assert parallel.timings["workers"] == 2 and serial.timings["workers"] == 1
    assert parallel.timings["block_groups"] >= 4 > serial.timings["block_groups"]  # really split, really fanned out
    assert _verdicts(parallel) == _verdicts(serial)
    assert [b.bad for b in parallel.blocks if not b.label] == [i == layer for i in range(sizes.layers)]
    assert parallel.first_failing == serial.first_failing
    assert parallel.first_failing is not None and parallel.first_failing.op == f"/layers.{layer}/self_attn/rotary_q/Concat"
    lines = [e.message for e in events if e.stage == "htp-sim: blocks" and "left" in e.message]
    assert len(lines) == parallel.timings["block_groups"] and all("running on 1 node(s)" in m for m in lines), lines


def test_the_cli_runs_blocks_on_every_core_and_keeps_its_json_clean(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from qnn_debug.cli import app

    d = build_sized_decoder(tmp_path / "m", NARROW, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=2)})
    res = CliRunner().invoke(app, ["localise-blocks", d.faulty["rotary"], "--reference-model", d.clean, "--inputs",
                                   d.inputs, "--inner", "none", "--workers", "2", "--max-memory", "2G", "--out",
                                   str(tmp_path / "out"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["timings"]["workers"] == 2
    assert doc["first_failing"]["op"] == "/layers.2/self_attn/rotary_q/Concat"


def _timed_jobs(n: int, memory: int) -> list[Job]:
    return [Job(key=f"t{i}", label=f"job {i}", fn="qnn_debug_testkit.held_jobs:timed", args={"seconds": 1.0},
                memory=memory) for i in range(n)]


def test_the_memory_budget_bounds_the_jobs_running_at_once(tmp_path: Path) -> None:
    ex = RayExecutor(cluster=None, budget=BUDGET, workers=2, timeout=120)
    # two jobs of 0.9 GiB fit the 2 GiB node together; two of 1.2 GiB do not, so they run one after another
    small = ex.run(_timed_jobs(4, int(0.9 * GIB)), progress=Progress(), stage="small")
    big = ex.run(_timed_jobs(4, int(1.2 * GIB)), progress=Progress(), stage="big")
    assert most_at_once([(r["start"], r["end"]) for r in small]) == 2
    assert most_at_once([(r["start"], r["end"]) for r in big]) == 1


def test_a_job_no_node_can_hold_is_refused_not_left_waiting(tmp_path: Path) -> None:
    from qnn_debug.errors import MemoryBudgetError

    ex = RayExecutor(cluster=None, budget=BUDGET, workers=2, timeout=120)
    with pytest.raises(MemoryBudgetError, match=r"job 0 needs about 3\.0 GiB"):
        ex.run(_timed_jobs(1, 3 * GIB), progress=Progress(), stage="too big")


CANCELLED = """
import sys
from pathlib import Path
from qnn_debug.parallel import Job
from qnn_debug.parallel.ray_engine import RayExecutor
from qnn_debug.progress import Progress
from qnn_debug_testkit.held_jobs import hold
pids, gates = Path(sys.argv[1]), Path(sys.argv[2])
jobs = [hold(Job(key=f"j{i}", label=f"job {i}", fn="qnn_debug_testkit.held_jobs:timed", args={"seconds": 0},
                 memory=1 << 28), pids, gates) for i in range(4)]
RayExecutor(cluster=None, budget=1 << 31, workers=2, timeout=600).run(jobs, progress=Progress(), stage="held")
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_cancelling_the_run_stops_every_job(tmp_path: Path) -> None:
    """``job_cancel`` ends the engine child by the kill rule (:func:`qnn_debug.process.kill_sync`): every job of
    the run (each a Ray worker process of the child's embedded cluster) stops with it."""
    from qnn_debug import process

    pids, gates = tmp_path / "pids", tmp_path / "gates"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(CANCELLED), encoding="utf-8")
    log = open(tmp_path / "run.log", "wb")  # noqa: SIM115 - closed with the test's tmp folder
    proc = process.start([sys.executable, str(script), str(pids), str(gates)], env=dict(os.environ), stdout=log,
                         merge_stderr=True)
    try:
        deadline = time.monotonic() + 90
        while len(list(pids.glob("*"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        running = [int(p.suffix[1:]) for p in pids.glob("*")]
        assert len(running) == 2, (running, proc.poll())  # two workers, two held jobs at once
        process.kill_sync(proc)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in running)
        assert len(list(pids.glob("*"))) == 2  # and the queued jobs never started
    finally:
        if proc.poll() is None:
            process.kill_sync(proc)


def test_a_rerun_resumes_from_the_kept_jobs_and_never_from_stale_ones(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", NARROW, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=1)})
    out = tmp_path / "out"
    req = {"reference_model": Path(d.clean), "inputs": Path(d.inputs), "out": out, "workers": 1, "force": True}
    first = run_blocks(BlockRequest(model=Path(d.faulty["rotary"]), **req))
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.json")}
    assert len(kept) == first.timings["block_groups"] + 1  # every group and the bad block's ops
    again = run_blocks(BlockRequest(model=Path(d.faulty["rotary"]), **req))
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.json")} == kept  # none run again
    assert _verdicts(again) == _verdicts(first) and again.first_failing == first.first_failing
    clean = run_blocks(BlockRequest(model=Path(d.clean), **req))  # another model: nothing of the old run is reused
    assert clean.first_failing_block is None and not any(b.bad for b in clean.blocks)


@pytest.mark.parametrize(("fault", "graph"), [("vision_rotary_swapped", "visual"), ("deepstack_dropped", "llm")])
def test_parallel_gives_the_serial_answer_on_vl_export_graphs(tmp_path: Path, fault: str, graph: str) -> None:
    """Another builder's graphs: a Qwen3-VL export folder (vision encoder; M-RoPE decoder with deepstack adds)."""
    from typer.testing import CliRunner

    from qnn_debug.cli import app
    from qnn_debug_testkit.vl import VLExportRequest, build_vl_export

    clean = build_vl_export(tmp_path / "clean", VLExportRequest(mnn=False)).dir
    bug = build_vl_export(tmp_path / "bug", VLExportRequest(mnn=False, fault=fault)).dir
    docs = []
    for workers in ("1", "2"):
        res = CliRunner().invoke(app, ["localise-blocks", str(bug), "--reference-model", str(clean), "--graph", graph,
                                       "--inner", "none", "--workers", workers, "--max-memory", "2G", "--out",
                                       str(tmp_path / f"w{workers}"), "--json"])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(res.stdout))
    serial, parallel = docs
    assert parallel["timings"]["workers"] == 2 and parallel["timings"]["block_groups"] >= serial["timings"]["block_groups"]
    assert [(b["bad"], b["label"], b["first"]) for b in parallel["blocks"]] == \
        [(b["bad"], b["label"], b["first"]) for b in serial["blocks"]]
    assert parallel["first_failing"] == serial["first_failing"] and serial["first_failing"] is not None
