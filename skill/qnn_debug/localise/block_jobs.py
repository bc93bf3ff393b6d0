"""The simulator's block runs as independent jobs (:mod:`qnn_debug.parallel`): each group of blocks builds its
own side-by-side stage and fp16 floor and runs it in its own session, on whichever worker is free.

Why a group can run anywhere: once the CPU reference has written the boundary values (``save_values``), a group
reads only them and the model files (weights stay in the model's data file; a worker opens each model once and
keeps it), so the groups do not wait for each other. The op-by-op stage of the first bad block is one more job.
The answer has the shape the one-process run gave (``blocks``, ``not_judged``, ``first_bad_block``, ``ops``).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..compare.thresholds import Thresholds
from ..parallel import Executor, Job, ParallelOptions, choose_executor
from ..progress import Progress
from .budget import PROCESS_BASE, block_cost, default_budget, plan_groups
from .streamed import StreamedCut, _alone_outside, _weights_of, cut_streamed, save_values

FN = "qnn_debug.localise.block_jobs"


def values_digest(cut: StreamedCut) -> str:
    """What the jobs read that a rerun may have changed: the boundary values and the models' files."""
    h = hashlib.sha256()
    for name in sorted(cut.values):
        a = np.ascontiguousarray(np.asarray(cut.values[name]))
        h.update(f"{name}|{a.dtype}|{a.shape}".encode())
        h.update(a.tobytes())
    for lazy in (cut.target, cut.reference):
        files = {Path(lazy.path)} | {lazy.base / e.value for t in lazy.model.graph.initializer
                                     for e in t.external_data if e.key == "location"}
        for f in sorted(files):
            st = f.stat()
            h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()


def balanced(costs: list[int], groups: int) -> list[list[int]]:
    """Consecutive indices in ``groups`` groups of about equal summed cost (at least one index each)."""
    groups = max(1, min(groups, len(costs)))
    total = sum(costs) or 1
    out: list[list[int]] = [[]]
    acc = 0
    for i, c in enumerate(costs):
        left = len(costs) - i
        if out[-1] and (acc >= total * len(out) / groups or left == groups - len(out)) and len(out) < groups:
            out.append([])
        out[-1].append(i)
        acc += c
    return out


def _consecutive(indices: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in indices:
        if out and out[-1][-1] + 1 == i:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def plan(cut: StreamedCut, budget: int, slots: int) -> tuple[list[list[int]], list[int]]:
    """Groups of sent segments (indices into ``cut.sent``) and each group's memory: within ``budget`` for one
    process when serial; with several slots, each group within its share of the node's budget, and at least two
    groups per slot so a slow worker does not hold up the end."""
    sent = cut.sent
    hidden = max((np.asarray(cut.values[b.inputs[0]]).nbytes for b in cut.ref_blocks if b.inputs), default=0)
    costs = [block_cost(_weights_of(cut.target.model, cut.tgt_blocks[k].positions), hidden) for k in sent]
    names = [cut.tgt_blocks[k].name for k in sent]
    outside = [bool(cut.ref_blocks[k].label) for k in sent]
    groups = plan_groups(costs, budget, names)  # refuses a block that cannot fit a process
    layers = [i for i in range(len(costs)) if not outside[i]]
    if slots > 1 and layers:
        # the layers' jobs within a share of the node's budget, so ``slots`` of them run at once; a segment
        # outside the layers (the LM head: at 1.7B width it alone needs most of a 4G budget) is a job of its own
        # under its own memory, and must not size the layers' jobs (it did: one job at a time)
        share = max(budget // slots, PROCESS_BASE + max(costs[i] for i in layers))
        groups = plan_groups([0 if outside[i] else c for i, c in enumerate(costs)], share, names)
        if len(groups) < 2 * slots:
            # the layers alone in equal runs (the ops outside them stand alone anyway, and their cost in memory
            # says little about their time: the head's is large, its session short)
            runs = [[layers[j] for j in g] for g in balanced([costs[i] for i in layers], 2 * slots)]
            if all(sum(costs[i] for i in g) <= share - PROCESS_BASE for g in runs):
                pieces = [part for g in runs for part in _consecutive(g)]  # never across ops outside the layers
                groups = sorted(pieces + [[i] for i in range(len(costs)) if outside[i]])
    groups = _alone_outside(groups, outside)
    return groups, [PROCESS_BASE + sum(costs[i] for i in g) for g in groups]


def jobs_for(cut: StreamedCut, work: Path, groups: list[list[int]], memory: list[int], session: dict[str, Any],
             th: Thresholds, env: dict[str, str]) -> tuple[list[Job], dict[str, Any]]:
    """One job per group; the values every job reads are written once (``save_values``)."""
    ops_job = save_values(cut, work)
    digest = values_digest(cut)
    sent = cut.sent
    from ..versions import library_versions

    # the simulator's and the tool's versions too: a result kept for resume is never one of another simulator
    common = {**ops_job, "session": session, "thresholds": th.model_dump(mode="json"), "digest": digest,
              "versions": library_versions()}
    jobs = []
    for g, members in enumerate(groups):
        ks = [sent[m] for m in members]
        name = cut.tgt_blocks[ks[-1]].name
        jobs.append(Job(key=f"blocks{g:03d}", label=name, fn=f"{FN}:run_group", memory=memory[g], env=env, args={
            **common, "tag": f"blocks{g:03d}", "members": members, "name": name,
            "outs": [cut.outs_per_block[k] for k in ks],
            "optional": all(bool(cut.ref_blocks[k].label) for k in ks)}))
    return jobs, common


def run(cut: StreamedCut, work: Path, request: Any, session: dict[str, Any], th: Thresholds,
        progress: Progress) -> tuple[dict[str, Any], dict[str, float]]:
    """Every group as a job, then the first bad block's ops as one more: the one-process answer's shape."""
    from .. import fs

    budget = request.max_memory or default_budget()
    work_bytes = sum(_weights_of(cut.target.model, cut.tgt_blocks[k].positions) for k in cut.sent)
    executor: Executor = choose_executor(ParallelOptions(workers=getattr(request, "workers", None),
                                                         cluster=getattr(request, "cluster", None)),
                                         budget=budget, work_bytes=work_bytes, timeout=request.timeout, log_dir=work)
    groups, memory = plan(cut, budget, executor.slots)
    roots = fs.allowed_roots()
    env = {fs.ROOTS_ENV: os.pathsep.join(str(r) for r in roots)} if roots else {}
    t0 = time.monotonic()
    jobs, common = jobs_for(cut, work, groups, memory, session, th, env)
    timings = {"prepare_s": round(time.monotonic() - t0, 3), "block_groups": float(len(groups)),
               "workers": float(executor.slots)}
    store = work.parent / "jobs"
    t0 = time.monotonic()
    results = executor.run(jobs, progress=progress, stage="htp-sim: blocks", store=store)
    answer: dict[str, Any] = {"blocks": [], "lowered": []}
    for res in results:
        answer["blocks"].extend(res["blocks"])
        answer["lowered"].extend(res.get("lowered") or [])
        if res.get("not_judged"):
            answer.setdefault("not_judged", {})[str(len(answer["blocks"]) - 1)] = res["not_judged"]
    answer["blocks_s"] = round(time.monotonic() - t0, 3)
    bad = next((i for i, piece in enumerate(answer["blocks"]) if any(t["status"] == "bad" for t in piece)), None)
    answer["first_bad_block"] = bad
    if bad is not None:
        ops = Job(key=f"ops{bad:03d}", label=f"ops of {cut.tgt_blocks[cut.sent[bad]].name}", fn=f"{FN}:run_ops",
                  memory=max(memory), env=env, args={**common, "bad": bad})
        answer.update(executor.run([ops], progress=progress, stage="htp-sim: ops", store=store)[0])
    if executor.name == "ray":
        from ..parallel.ray_engine import started_s

        timings["engine_start_s"] = started_s() or 0.0
    return answer, timings


def simulate(request: Any, work: Path, progress: Progress, th: Thresholds,
             tgt: Any) -> tuple[StreamedCut, dict[str, Any], dict[str, float]]:
    """Reference, stages and the target's block session(s); returns the cut, the worker's answer and the timings."""
    from ..targets.base import ProbeSetup

    cut = cut_streamed(request, progress)
    timings = dict(cut.timings)
    session = tgt.session_options(ProbeSetup(work=work, soc_model=request.soc_model, htp_arch=request.htp_arch,
                                             options=request.options, timeout=request.timeout, progress=progress))
    t0 = time.monotonic()
    response, job_timings = run(cut, work, request, session, th, progress)  # serial, on every core, or a cluster
    timings.update(job_timings)
    timings["htp_sim_s"] = round(time.monotonic() - t0 - job_timings["prepare_s"], 3)
    timings.update({f"htp_sim_{k}": v for k, v in response.items() if k.endswith("_s")})
    notes = [*response.get("lowered", []), *(response.get("ops_stage") or {}).get("lowered", [])]
    response["lowered"] = list(dict.fromkeys(re.sub(r"@p\d+", "", n) for n in notes))  # one note per model node
    return cut, response, timings


# ---- worker side: called in the worker process by name (qnn_debug.parallel.runner.run_job) ----


@lru_cache(maxsize=4)
def _lazy(path: str, stamp: tuple[int, int]) -> Any:
    from .external import open_lazy

    return open_lazy(path)


def _open(path: str) -> Any:
    st = Path(path).stat()
    return _lazy(path, (st.st_size, st.st_mtime_ns))


@lru_cache(maxsize=2)
def _values(path: str, digest: str, keys: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    stored = np.load(path, allow_pickle=False)
    return {n: stored[key] for n, key in keys}


@lru_cache(maxsize=2)
def _op_types(path: str, stamp: tuple[int, int]) -> dict[str, str]:
    return {o: n.op_type for n in _open(path).model.graph.node for o in n.output}


def run_group(args: dict[str, Any]) -> dict[str, Any]:
    """One group of blocks: its side-by-side stage and fp16 floor (ONNX Runtime CPU), then one simulator session
    judged against them. A group of ops outside the layers that the simulator refuses is "not judged"."""
    from ..errors import QnnDebugError
    from ..workers.sim_probe_worker import _judge_pieces
    from .streamed import _elem, stage

    t0 = time.monotonic()
    target, reference = _open(args["target"]), _open(args["reference"])
    st = Path(args["reference"]).stat()
    types = {n: int(t) for n, t in args["types"].items()}
    values = _values(args["values"], args["digest"], tuple(sorted(args["keys"].items())))
    shapes = {n: (list(v.shape), _elem(v, types.get(n))) for n, v in values.items()}
    members = args["members"]
    built = stage(Path(args["work"]), args["tag"], target, reference, [args["blocks"][m] for m in members],
                  [args["ref_blocks"][m] for m in members], args["outs"], shapes, values,
                  _op_types(args["reference"], (st.st_size, st.st_mtime_ns)), types)
    floor_s = time.monotonic() - t0
    t0 = time.monotonic()
    th = Thresholds.model_validate(args["thresholds"])
    try:
        judged = _judge_pieces(built, args["session"], th)
    except QnnDebugError as e:
        if not args["optional"]:
            raise
        return {"blocks": [[] for _ in built["pieces"]], "not_judged": e.message, "lowered": built["lowered"]}
    return {"blocks": judged, "lowered": built["lowered"], "floor_s": round(floor_s, 3),
            "sim_s": round(time.monotonic() - t0, 3)}


def run_ops(args: dict[str, Any]) -> dict[str, Any]:
    """Every op of the first bad block side by side (``ops_stage``), judged on the simulator."""
    from ..workers.sim_probe_worker import _judge_pieces
    from .streamed import ops_stage

    t0 = time.monotonic()
    built = ops_stage(args, int(args["bad"]))
    answer: dict[str, Any] = {"ops_prepare_s": round(time.monotonic() - t0, 3)}
    if built is not None:
        t0 = time.monotonic()
        answer["ops_stage"] = built
        answer["ops"] = _judge_pieces(built, args["session"], Thresholds.model_validate(args["thresholds"]))
        answer["ops_s"] = round(time.monotonic() - t0, 3)
    return answer
