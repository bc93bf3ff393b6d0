"""``diagnose`` on a model too large for one simulator session runs its unit sessions as jobs of the parallel engine
(an unmarked chain, and each unit's marked session fed the unmarked values): the same answer and the same captured
tensors serially and on 2 workers; and the engine's job dependencies (``Job.after``) and resume underneath.

Models: the sized Qwen3 builder (``qnn_debug_testkit.sized``) and MNN's llmexport of a random-weight toy Qwen3
(``real_exports``), both with external weights. The streamed path is forced by refusing the whole-model session
(``fits_whole``): a ``--max-memory`` low enough to refuse it would leave no room for two jobs at once on the node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError, TargetError
from qnn_debug.parallel import Job
from qnn_debug.parallel.ray_engine import RayExecutor, connect
from qnn_debug.parallel.serial import SerialExecutor
from qnn_debug.progress import NULL_PROGRESS, Progress, ProgressEvent
from qnn_debug_testkit import real_faults as F
from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder
from qnn_debug_testkit.tiny_graph import GraphFaults

GIB = 1 << 30
BUDGET = 2 * GIB
WIDER = Qwen3Sizes(layers=4, hidden=256, heads=8, kv_heads=4, head_dim=48, intermediate=512, vocab=800, seed=3)
STEP = "qnn_debug_testkit.held_jobs:file_step"


@pytest.fixture(scope="module", autouse=True)
def engine() -> Iterator[None]:
    """One embedded cluster for the module: 2 workers, a 2 GiB budget (the runs below ask for the same)."""
    connect(None, 2, BUDGET)
    yield
    import ray

    ray.shutdown()


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    import qnn_debug.localise.bisect_stream as bs

    monkeypatch.setattr(bs, "fits_whole", lambda lazy, budget: False)


def _run(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "htp-sim-chunked" / "run.json").read_text(encoding="utf-8"))
    return doc


def test_streamed_diagnose_on_two_workers_gives_the_serial_answer(tmp_path: Path, streamed: None) -> None:
    from qnn_debug import api

    d = build_sized_decoder(tmp_path / "m", WIDER, seq=16, faults={"spike": GraphFaults(residual_spike_layer=1)})
    req = {"model": d.faulty["spike"], "inputs": d.inputs, "max_memory": "2G"}
    serial = api.execute("diagnose", {**req, "out": str(tmp_path / "serial"), "workers": 1})
    events: list[ProgressEvent] = []
    parallel = api.execute("diagnose", {**req, "out": str(tmp_path / "parallel"), "workers": 2},
                           Progress(events.append))
    for r in (serial, parallel):
        assert r.method == "chunked_dump" and r.compare is not None, r.fallback  # type: ignore[attr-defined]
        assert r.compare.first_failing.op == "/layers.2/input_layernorm/Pow"  # type: ignore[attr-defined]
        assert (r.compare.verdict.kind, r.compare.verdict.pattern) == ("precision", "fp16_range")  # type: ignore[attr-defined]
    one, two = _run(tmp_path / "serial"), _run(tmp_path / "parallel")
    assert (one["extra"]["parallel"]["executor"], two["extra"]["parallel"]["executor"]) == ("serial", "ray")
    assert two["extra"]["parallel"]["workers"] == 2 and parallel.timings["htp_sim_workers"] == 2  # type: ignore[attr-defined]
    assert sorted(t["name"] for t in one["tensors"]) == sorted(t["name"] for t in two["tensors"])
    assert len(two["extra"]["chunks"]) == WIDER.layers + 2 and two["extra"]["unmarkable"] == one["extra"]["unmarkable"]
    assert set(two["observer_effect_db"]) >= {"logits"} and two["extra"]["simulator_s"]["marked"] > 0
    jobs = [e.message for e in events if e.stage == "htp-sim: units" and "left" in e.message]
    assert len(jobs) == 2 * (WIDER.layers + 2), jobs  # every unit's unmarked and marked job, each with an ETA
    assert not (tmp_path / "parallel" / "htp-sim-chunked.jobs").exists()  # the part files go once the run is written


@pytest.mark.real_export
def test_streamed_diagnose_of_a_real_llm_onnx_on_two_workers_names_the_broken_rotary(
        real_exports, tmp_path: Path, streamed: None) -> None:
    clean = F.copy_export(real_exports("qwen3", "a", "onnx"), tmp_path / "Qwen3-clean")
    bug = F.rotary_without_neg(clean, tmp_path / "Qwen3-rotary", 1)
    runner = CliRunner()
    docs, runs = [], []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        res = runner.invoke(app, ["diagnose", bug.file, "--reference-model", str(clean / "onnx" / "llm.onnx"),
                                  "--max-memory", "2G", "--workers", workers, "--out", str(out), "--json"])
        assert res.exit_code in (0, 1), res.output
        docs.append(json.loads(res.stdout))
        runs.append(_run(out))
    for doc in docs:
        assert doc["method"] == "chunked_dump", doc.get("fallback")
        assert doc["compare"]["first_failing"]["op"] == bug.op and doc["compare"]["verdict"]["kind"] == "real_bug"
    assert [r["extra"]["parallel"]["executor"] for r in runs] == ["serial", "ray"]
    assert sorted(t["name"] for t in runs[0]["tensors"]) == sorted(t["name"] for t in runs[1]["tensors"])


def _steps(tmp: Path, spec: list[tuple[str, tuple[str, ...], float]], **extra: Any) -> list[Job]:
    """``(key, after, seconds)`` -> file_step jobs, each reading the files of its ``after`` jobs."""
    return [Job(key=k, label=k, fn=STEP, memory=1 << 20, after=after,
                args={"key": k, "seconds": s, "reads": [str(tmp / f"{a}.txt") for a in after],
                      "out": str(tmp / f"{k}.txt"), "log": str(tmp / "log.txt"), **extra.get(k, {})})
            for k, after, s in spec]


def test_a_job_runs_after_the_jobs_it_depends_on_on_two_workers(tmp_path: Path) -> None:
    # the chain a -> b -> c reads each other's files; d and e depend on nothing and take the free worker
    jobs = _steps(tmp_path, [("a", (), 1.0), ("b", ("a",), 0.5), ("c", ("b",), 0.0), ("d", (), 0.5),
                             ("e", (), 0.5), ("f", ("a", "d"), 0.0)])
    results = RayExecutor(cluster=None, budget=BUDGET, workers=2, timeout=120).run(jobs, progress=NULL_PROGRESS,
                                                                                  stage="test")
    assert [r["files"] for r in results] == [[str(tmp_path / f"{k}.txt")] for k in "abcdef"]
    assert (tmp_path / "c.txt").read_text(encoding="utf-8") == "a b c"
    assert (tmp_path / "f.txt").read_text(encoding="utf-8") == "a d f"
    order = [line.split()[0] for line in (tmp_path / "log.txt").read_text(encoding="utf-8").splitlines()]
    assert order.index("a") < order.index("b") < order.index("c") and order.index("d") < order.index("f")


@pytest.mark.parametrize("executor", ["serial", "ray"])
def test_a_list_out_of_dependency_order_is_refused(tmp_path: Path, executor: str) -> None:
    jobs = _steps(tmp_path, [("b", ("a",), 0.0), ("a", (), 0.0)])
    run = (SerialExecutor(timeout=60) if executor == "serial"
           else RayExecutor(cluster=None, budget=BUDGET, workers=2, timeout=60))
    with pytest.raises(BadInputError, match="must run after 'a', which is later in the list"):
        run.run(jobs, progress=NULL_PROGRESS, stage="test")
    assert not (tmp_path / "log.txt").exists()  # nothing ran


@pytest.mark.parametrize("executor", ["serial", "ray"])
def test_a_rerun_reuses_kept_jobs_only_while_their_files_exist(tmp_path: Path, executor: str) -> None:
    flag = tmp_path / "fail"
    flag.touch()
    jobs = _steps(tmp_path, [("a", (), 0.0), ("b", ("a",), 0.0), ("c", ("b",), 0.0)], c={"fail_if": str(flag)})
    store = tmp_path / "jobs"

    def run() -> list[str]:
        ex = (SerialExecutor(timeout=60) if executor == "serial"
              else RayExecutor(cluster=None, budget=BUDGET, workers=2, timeout=60))
        ex.run(jobs, progress=NULL_PROGRESS, stage="test", store=store)
        return [line.split()[0] for line in (tmp_path / "log.txt").read_text(encoding="utf-8").splitlines()]

    with pytest.raises(TargetError, match="c told to fail"):
        run()
    assert sorted(p.stem for p in store.glob("*.json")) == ["a", "b"]
    flag.unlink()
    assert run() == ["a", "b", "c"]  # a and b kept: only c ran again
    (tmp_path / "b.txt").unlink()  # what b wrote is gone: b runs again, a and c are still good
    assert run() == ["a", "b", "c", "b"]
    assert (tmp_path / "c.txt").read_text(encoding="utf-8") == "a b c"


def test_jobs_ready_together_are_submitted_critical_path_first(tmp_path: Path) -> None:
    from qnn_debug.parallel.jobs import schedule

    # the chunked-marking shape, listed marked-first: m<k> and u<k> wait for u<k-1>; the chain u0 -> u1 -> u2 is
    # the critical path, so of two jobs ready together the unmarked one goes first
    jobs = _steps(tmp_path, [("m0", (), 0), ("u0", (), 0), ("m1", ("u0",), 0), ("u1", ("u0",), 0),
                             ("m2", ("u1",), 0), ("u2", ("u1",), 0), ("u3", ("u2",), 0)])
    order = [jobs[i].key for i in schedule(jobs, list(range(len(jobs))))]
    assert order == ["u0", "m0", "u1", "m1", "u2", "m2", "u3"]
    assert [jobs[i].key for i in schedule(jobs, [0, 2, 4])] == ["m0", "m1", "m2"]  # the others kept: still in order
