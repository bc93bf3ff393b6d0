"""Chunked marking of a model too large for one simulator session, as jobs of the parallel engine.

Why jobs: the unmarked model runs unit by unit (a unit is a decoder layer, or the ops between layers), each unit fed
what the units before it produced on the simulator; that chain is sequential. Each unit's marked session is fed the
same unmarked values, the production graph's, so it waits only for the unmarked chain to reach its unit and never for
another marked unit: on N cores the marked sessions run beside the chain (:mod:`qnn_debug.workers.chunked_jobs`).
Marking one unit on the production graph's inputs also makes its observer effect its own: its outputs against the
unmarked unit's, same inputs.

The jobs exchange values through files in a work folder beside the run (``<run>.jobs/``); the run directory is
assembled here from them, unit by unit, and the work folder goes once the run is written. A run that stopped (a
worker lost twice, a cancel, a timeout) keeps it, and the same command resumes with the jobs not yet done.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import fs
from ..parallel import Job, ParallelOptions, choose_executor
from ..progress import Progress
from ..runstore import Run, RunRecord, RunWriter, load_run, prepare_run_dir
from ..versions import library_versions
from .budget import PROCESS_BASE, block_cost

FN = "qnn_debug.workers.chunked_jobs"
INPUTS = "inputs.npz"


def work_dir(run_dir: Path) -> Path:
    """Where the jobs of ``run_dir`` keep their files until the run is written (and across a resume)."""
    return run_dir.parent / f"{run_dir.name}.jobs"


def _digest(feeds: dict[str, np.ndarray], model_files: list[Path], options: dict[str, Any]) -> str:
    """What a job reads that a rerun may have changed: the inputs, the model's files, the session options."""
    h = hashlib.sha256()
    for name in sorted(feeds):
        a = np.ascontiguousarray(feeds[name])
        h.update(f"{name}|{a.dtype}|{a.shape}".encode())
        h.update(a.tobytes())
    for f in sorted(model_files):
        st = f.stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}".encode())
    h.update(repr(sorted(options.items())).encode())
    return h.hexdigest()


def run_streamed(model_path: Path, out: Path, *, inputs: Path, provider: dict[str, str], disabled: list[str],
                 budget: int, baseline: Path, soc_model: int, force: bool, timeout: float, progress: Progress,
                 parallel: ParallelOptions | None = None) -> Run:
    """The run directory of ``model_path`` marked unit by unit (see the module docstring); only the graph is held
    here, and every unit's file points into the original data file."""
    from ..baseline import load_baseline
    from ..inputs import fix_input_shapes, prepare_inputs, save_npz
    from ..onnx_graph import graph_inputs
    from ..targets.onnx_capture import capture_plan, model_info
    from .bisect_stream import boundary_shapes
    from .external import LazyModel, open_lazy, tensor_sizes
    from .pieces import Chain, plan_chain, save_pieces
    from .stream_baseline import hidden_bytes

    opened = open_lazy(model_path)
    prepared = prepare_inputs(graph_inputs(opened.model), inputs=inputs)
    lazy = LazyModel(opened.path, fix_input_shapes(opened.model, prepared.shapes), opened.base)
    hidden = hidden_bytes(prepared.arrays)
    chain = plan_chain(lazy.model, budget, hidden)  # refuses a unit that cannot fit a process
    shapes = boundary_shapes(load_baseline(baseline).reference, prepared.arrays)
    run_dir = prepare_run_dir(out, force=force).resolve()
    work = fs.make_dirs(work_dir(run_dir), what="work folder")
    (work / "parts").mkdir(exist_ok=True)
    units = save_pieces(lazy, Chain(chain.units, chain.units, [[k] for k in range(len(chain.units))]), shapes, work,
                        "unit")
    lowered = list(dict.fromkeys(w for u in units for w in u.pop("lowered")))
    for unit, block in zip(units, chain.units, strict=True):
        unit["layer"] = block.first  # -1: the ops outside the layers
    inputs_npz = str(save_npz(work / INPUTS, prepared.arrays))
    plan = capture_plan(lazy.model)
    sizes = tensor_sizes(lazy.model)
    nodes = lazy.model.graph.node
    memory = [PROCESS_BASE + block_cost(sum(sizes.get(i, 0) for i in {i for p in u.positions for i in nodes[p].input}),
                                        hidden) for u in chain.units]
    files = {Path(lazy.path)} | {lazy.base / e.value for t in lazy.model.graph.initializer for e in t.external_data
                                 if e.key == "location"}
    roots = fs.allowed_roots()
    env = {fs.ROOTS_ENV: os.pathsep.join(str(r) for r in roots)} if roots else {}
    common = {"options": provider, "disabled_optimizers": disabled, "external_dir": str(lazy.base),
              "digest": _digest(prepared.arrays, list(files), provider), "versions": library_versions()}
    jobs = _jobs(units, plan, memory, work, inputs_npz, common, env)
    executor = choose_executor(parallel or ParallelOptions(), budget=budget, work_bytes=sum(sizes.values()),
                               timeout=timeout, log_dir=work)
    t0 = time.monotonic()
    results = executor.run(jobs, progress=progress, stage="htp-sim: units", store=work / "jobs")
    wall = time.monotonic() - t0
    record = RunRecord(role="target", target="htp-sim", precision="fp16", model=model_info(model_path, lazy.model),
                       inputs=prepared.info, soc_model=soc_model,
                       htp_arch=int(provider["htp_arch"]) if "htp_arch" in provider else None,
                       versions=library_versions(), outputs=[o.name for o in lazy.model.graph.output],
                       warnings=[*prepared.warnings, *lowered,
                                 f"captured in {len(units)} marked sessions (one per unit: a decoder layer or the "
                                 "ops between layers), each fed the unmarked units' values before it: the model does "
                                 "not fit one session within the memory budget"])
    engine = {"executor": executor.name, "workers": executor.slots, "jobs": len(jobs), "wall_s": round(wall, 3)}
    if executor.name == "ray":
        from ..parallel.ray_engine import started_s

        engine["engine_start_s"] = started_s() or 0.0
    if executor.slots > 1:  # how long the chain of unmarked units waited between its jobs (its critical path)
        spans = [r["span"] for r in results[0::2] if r.get("span")]
        engine["chain_waits_s"] = round(sum(max(0.0, b[0] - a[1]) for a, b in itertools.pairwise(spans)), 3)
    _assemble(run_dir, record, units, plan, prepared.arrays, results, provider, engine)
    shutil.rmtree(work, ignore_errors=True)  # the run is written: the jobs' files are no longer needed
    return load_run(run_dir)


def _jobs(units: list[dict[str, Any]], plan: list[Any], memory: list[int], work: Path, inputs_npz: str,
          common: dict[str, Any], env: dict[str, str]) -> list[Job]:
    """Per unit an unmarked job after the previous unit's, and a marked one after the previous unit's unmarked job
    (both read the same unmarked values); the chain's job first, so it is submitted before the marked one.

    The marked job of the first decoder layer (the pilot) also waits for the marked jobs before it, and every later
    marked job for the pilot: the kinds of tensor that break a marked graph, found once there (halving a layer's
    marks until they stand alone costs a dozen sessions), are skipped at once in every later unit, as a one-session
    chain of marked units did."""
    made: dict[str, str] = {}  # tensor -> the file of the unmarked unit that made it
    jobs: list[Job] = []
    pilot = next((k for k, u in enumerate(units) if u["layer"] >= 0), 0)
    kinds = str(work / "parts" / f"marked{pilot:03d}.npz.kinds.json")
    for k, unit in enumerate(units):
        lo, hi = unit["positions"]
        sources = {n: made.get(n, inputs_npz) for n in unit["inputs"]}
        after = (f"unmarked{k - 1:03d}",) if k else ()
        name = f"unit {k + 1}/{len(units)}"
        base = {**common, "unit": {key: unit[key] for key in ("model", "inputs", "outputs", "positions")},
                "sources": sources}
        plain = str(work / "parts" / f"unmarked{k:03d}.npz")
        jobs.append(Job(key=f"unmarked{k:03d}", label=f"{name} unmarked", fn=f"{FN}:unmarked_unit", memory=memory[k],
                        env=env, after=after, args={**base, "out": plain}))
        mine = [p.name for p in plan if p.kind != "input" and lo <= p.position <= hi]
        waits = (tuple(f"marked{j:03d}" for j in range(k)) if k == pilot
                 else (f"marked{pilot:03d}",) if k > pilot else ())
        jobs.append(Job(key=f"marked{k:03d}", label=f"{name} marked", fn=f"{FN}:marked_unit", memory=memory[k],
                        env=env, after=(*after, *waits), args={
                            **base, "names": mine, "out": str(work / "parts" / f"marked{k:03d}.npz"),
                            "kinds_from": [f"{j.args['out']}.kinds.json" for j in jobs if j.key in waits]
                            if k == pilot else [kinds] if k > pilot else []}))
        made.update({n: plain for n in unit["outputs"]})
    return jobs


def _assemble(run_dir: Path, record: RunRecord, units: list[dict[str, Any]], plan: list[Any],
              feeds: dict[str, np.ndarray], results: list[dict[str, Any]], provider: dict[str, str],
              engine: dict[str, Any]) -> None:
    """The run directory from the jobs' files, unit by unit (one unit's tensors in memory at a time)."""
    from ..targets.onnx_capture import write_plan
    from ..workers.htp_worker import _observer_effect

    writer = RunWriter(run_dir, record, force=True)
    write_plan(writer, [p for p in plan if p.kind == "input"], {}, feeds)
    chunks: list[dict[str, Any]] = []
    unmarkable: list[str] = []
    unmarked_out: dict[str, np.ndarray] = {}
    marked_out: dict[str, np.ndarray] = {}
    sim = {"unmarked": 0.0, "marked": 0.0}
    for k, unit in enumerate(units):
        plain, marked = results[2 * k], results[2 * k + 1]
        lo, hi = unit["positions"]
        mine = [p for p in plan if p.kind != "input" and lo <= p.position <= hi]
        with np.load(plain["files"][0], allow_pickle=False) as z:
            before = {n: z[n] for n in unit["outputs"]}
        with np.load(marked["files"][0], allow_pickle=False) as z:
            got = {n: z[n] for n in z.files}
        write_plan(writer, mine, got, feeds)
        effect = {n: _observer_effect(got[n], before[n])[0] for n in unit["outputs"] if before[n].dtype.kind == "f"}
        unmarked_out.update({n: before[n] for n in effect})
        marked_out.update({n: got[n] for n in effect})
        unmarkable.extend(marked.get("unmarkable") or [])
        sim["unmarked"] += float(plain.get("sim_s") or 0.0)
        sim["marked"] += float(marked.get("sim_s") or 0.0)
        chunks.append({"index": k, "tensors": len(mine), "first": mine[0].name if mine else None,
                       "last": mine[-1].name if mine else None, "seconds": marked.get("seconds"),
                       "observer_effect_db": effect})
        del got
    record.observer_effect_db = {n: db for c in chunks for n, db in c["observer_effect_db"].items()}
    record.extra.update({"provider_options": provider, "capture": {"dtype": "float32", "method": "chunked"},
                         "chunks": chunks, "unmarkable": unmarkable, "streamed": True, "parallel": engine,
                         "marked_outputs_file": "worst_chunk_outputs.npz",
                         "unmarked_outputs_file": "unmarked_outputs.npz",
                         "simulator_s": {k: round(v, 3) for k, v in sim.items()}})
    if unmarkable:
        record.warnings.append(f"{len(unmarkable)} tensor(s) break the graph when marked and were not captured "
                               f"(their ops are judged through their consumers): {', '.join(unmarkable[:6])}")
    np.savez(writer.dir / "worst_chunk_outputs.npz", **marked_out)  # type: ignore[arg-type]
    np.savez(writer.dir / "unmarked_outputs.npz", **unmarked_out)  # type: ignore[arg-type]
    writer.finish()

