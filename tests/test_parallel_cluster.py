"""Block jobs on a two-node Ray cluster on loopback (a head and a second worker process group registered to it
over 127.0.0.x, as a second machine would be): a worker killed mid-run gets its job retried; killed again, the
run stops with a typed error naming the block, the blocks already done are kept, and the rerun does only the
rest. One cluster for the module; every address is on this machine's loopback.

Model: the sized Qwen3 builder (``qnn_debug_testkit.sized``) with a rotary fault in layer 4.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import qnn_debug
import qnn_debug_testkit
from qnn_debug import process
from qnn_debug.compare.thresholds import Thresholds
from qnn_debug.errors import WorkerLostError
from qnn_debug.localise.block_jobs import jobs_for, plan
from qnn_debug.localise.blocks import BlockRequest
from qnn_debug.localise.streamed import cut_streamed
from qnn_debug.parallel import Job
from qnn_debug.parallel.ray_engine import RayExecutor
from qnn_debug.parallel.serial import SerialExecutor
from qnn_debug.progress import Progress
from qnn_debug.targets import target
from qnn_debug.targets.base import ProbeSetup
from qnn_debug_testkit.held_jobs import hold, started
from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder
from qnn_debug_testkit.tiny_graph import GraphFaults

GIB = 1 << 30
SIX = Qwen3Sizes(layers=6, hidden=128, heads=4, kv_heads=2, head_dim=64, intermediate=256, vocab=600)
HEAD, NODE = "127.0.0.2", "127.0.0.3"  # loopback: the kernel delivers all of 127/8 on this machine
RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD, 0))
        return int(s.getsockname()[1])


def _ray_start(argv: list[str], log: Path) -> Any:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
               PYTHONPATH=os.pathsep.join([str(Path(qnn_debug.__file__).parents[1]),
                                           str(Path(qnn_debug_testkit.__file__).parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    with open(log, "wb") as f:
        return process.start([RAY, "start", "--block", "--num-cpus=1", "--memory=2147483648",
                              "--object-store-memory=80000000", *argv], env=env, stdout=f, merge_stderr=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head (127.0.0.2) and a second node (127.0.0.3), one CPU and 2 GiB each; stopped by the kill rule."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:  # not imported here: the engine sets Ray's environment first
        pytest.skip("ray is not installed")
    temp = Path(tempfile.mkdtemp(prefix="rq"))
    port = _free_port()
    address = f"{HEAD}:{port}"
    head = _ray_start(["--head", f"--node-ip-address={HEAD}", f"--port={port}", "--include-dashboard=false",
                       "--disable-usage-stats", f"--temp-dir={temp}"], temp / "head.log")
    procs = [head]
    try:
        _wait_nodes(address, 1, head)
        procs.append(_ray_start([f"--address={address}", f"--node-ip-address={NODE}"], temp / "node.log"))
        _wait_nodes(address, 2, procs[-1])
        yield address
    finally:
        import ray

        ray.shutdown()
        for p in reversed(procs):
            process.kill_sync(p)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_nodes(address: str, n: int, proc: Any) -> None:
    from qnn_debug.parallel.ray_engine import connect

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ray start exited"
        try:
            ray = connect(address, 1, 0)
            if len([x for x in ray.nodes() if x.get("Alive")]) >= n:
                assert {x["NodeManagerAddress"] for x in ray.nodes() if x.get("Alive")} <= {HEAD, NODE}
                return
        except Exception:  # the head is still coming up
            pass
        time.sleep(1.0)
    raise AssertionError(f"the cluster at {address} did not reach {n} node(s)")


@pytest.fixture(scope="module")
def block_jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Job], list[dict[str, Any]]]:
    """The block jobs of a 6-layer decoder (8 segments, planned for 2 slots) and their serial answers."""
    tmp = tmp_path_factory.mktemp("blocks")
    d = build_sized_decoder(tmp / "m", SIX, seq=32, faults={"rotary": GraphFaults(wrong_rotary_layer=4)})
    request = BlockRequest(model=Path(d.faulty["rotary"]), reference_model=Path(d.clean), inputs=Path(d.inputs),
                           out=tmp / "out", max_memory=2 * GIB)
    work = tmp / "out" / "blocks"
    work.mkdir(parents=True)
    cut = cut_streamed(request, Progress())
    session = target("htp-sim").session_options(ProbeSetup(work=work, soc_model=69))
    groups, memory = plan(cut, 2 * GIB, 2)
    jobs, _ = jobs_for(cut, work, groups, memory, session, Thresholds(), {})
    return jobs, SerialExecutor(timeout=600).run(jobs, progress=Progress(), stage="serial")


def _verdicts(results: list[dict[str, Any]]) -> list[Any]:
    """What the jobs judged (their timings left out)."""
    return [(r["blocks"], r.get("not_judged")) for r in results]


def _in_thread(ex: RayExecutor, jobs: list[Job], store: Path) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["results"] = ex.run(jobs, progress=Progress(), stage="htp-sim: blocks", store=store)
        except BaseException as e:  # handed to the test
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, box


def _until(cond: Any, what: str, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_killed_worker_gets_its_block_job_retried_on_the_cluster(cluster: str, tmp_path: Path,
                                                                   block_jobs: tuple[list[Job], list[dict[str, Any]]]) -> None:
    jobs, serial = block_jobs
    pids, gates = tmp_path / "pids", tmp_path / "gates"
    gates.mkdir()
    held = [hold(j, pids, gates) for j in jobs]
    t, box = _in_thread(RayExecutor(cluster=cluster, budget=2 * GIB, workers=None, timeout=300), held, tmp_path / "jobs")
    _until(lambda: len({p.name.split(".")[0] for p in pids.glob("*")} if pids.is_dir() else ()) >= 2,
           "two jobs running at once, one per node")
    victim = next(j for j in jobs if started(pids, j.key))
    os.kill(started(pids, victim.key)[0], signal.SIGKILL)  # the worker dies mid-job
    for j in jobs:
        (gates / j.key).touch()
    t.join(300)
    assert "error" not in box, box.get("error")
    assert len(started(pids, victim.key)) == 2  # retried once, on a fresh worker
    assert _verdicts(box["results"]) == _verdicts(serial)


def test_a_block_lost_twice_is_named_and_the_rerun_does_only_the_rest(cluster: str, tmp_path: Path,
                                                                      block_jobs: tuple[list[Job], list[dict[str, Any]]]) -> None:
    jobs, serial = block_jobs
    pids, gates, store = tmp_path / "pids", tmp_path / "gates", tmp_path / "jobs"
    gates.mkdir()
    victim = jobs[len(jobs) // 2]
    for j in jobs:
        if j is not victim:
            (gates / j.key).touch()
    held = [hold(j, pids, gates) for j in jobs]
    ex = RayExecutor(cluster=cluster, budget=2 * GIB, workers=None, timeout=300)
    t, box = _in_thread(ex, held, store)
    _until(lambda: len(started(pids, victim.key)) == 1, "the victim's job started")
    _until(lambda: len(list(store.glob("*.json"))) == len(jobs) - 1, "every other block done")
    os.kill(started(pids, victim.key)[0], signal.SIGKILL)
    _until(lambda: len(started(pids, victim.key)) == 2, "the victim's job retried")
    os.kill(started(pids, victim.key)[1], signal.SIGKILL)
    t.join(120)
    err = box.get("error")
    assert isinstance(err, WorkerLostError), err
    assert victim.label in err.message and err.details["block"] == victim.label
    kept = {p.stem for p in store.glob("*.json")}
    assert kept == {j.key for j in jobs} - {victim.key}  # nothing of the blocks already done is lost
    before = {p.name for p in pids.glob("*")}
    (gates / victim.key).touch()
    assert _verdicts(ex.run(held, progress=Progress(), stage="htp-sim: blocks", store=store)) == _verdicts(serial)
    assert {p.name.split(".")[0] for p in pids.glob("*") if p.name not in before} == {victim.key}  # only the rest ran


def test_the_cli_sends_the_block_runs_to_the_cluster(cluster: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from qnn_debug.cli import app

    d = build_sized_decoder(tmp_path / "m", SIX, seq=16, faults={"rotary": GraphFaults(wrong_rotary_layer=3)})
    res = CliRunner().invoke(app, ["localise-blocks", d.faulty["rotary"], "--reference-model", d.clean, "--inputs",
                                   d.inputs, "--inner", "none", "--cluster", cluster, "--max-memory", "2G", "--out",
                                   str(tmp_path / "out"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["timings"]["block_groups"] >= 4  # planned for the cluster's slots, not one session
    assert doc["first_failing"]["op"] == "/layers.3/self_attn/rotary_q/Concat"


CANCELLED = """
import sys
from pathlib import Path
from qnn_debug.parallel import Job
from qnn_debug.parallel.ray_engine import RayExecutor
from qnn_debug.progress import Progress
from qnn_debug_testkit.held_jobs import hold
pids, gates, address = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
jobs = [hold(Job(key=f"j{i}", label=f"job {i}", fn="qnn_debug_testkit.held_jobs:timed", args={"seconds": 0},
                 memory=1 << 28), pids, gates) for i in range(4)]
RayExecutor(cluster=address, budget=1 << 31, workers=None, timeout=600).run(jobs, progress=Progress(), stage="held")
"""


def test_cancelling_a_run_on_the_cluster_stops_its_jobs_on_every_node(cluster: str, tmp_path: Path) -> None:
    """``job_cancel`` ends the engine child by the kill rule; its jobs on both nodes stop with it (the cluster's
    workers of a run whose driver is gone are ended by the cluster), and the queued ones never start."""
    pids, gates = tmp_path / "pids", tmp_path / "gates"
    script = tmp_path / "run.py"
    script.write_text(CANCELLED, encoding="utf-8")
    with open(tmp_path / "run.log", "wb") as log:
        proc = process.start([sys.executable, str(script), str(pids), str(gates), cluster], env=dict(os.environ),
                             stdout=log, merge_stderr=True)
    try:
        _until(lambda: pids.is_dir() and len(list(pids.glob("*"))) == 2, "one held job per node")
        running = [int(p.suffix[1:]) for p in pids.glob("*")]
        process.kill_sync(proc)
        _until(lambda: not any(_alive(p) for p in running), "the jobs stopped", limit=30)
        time.sleep(2)
        assert len(list(pids.glob("*"))) == 2  # the queued jobs never started
    finally:
        if proc.poll() is None:
            process.kill_sync(proc)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False
