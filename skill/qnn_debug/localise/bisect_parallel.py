"""A chained ``bisect`` (:mod:`.bisect_stream`) whose probes run as jobs of the parallel engine (:mod:`..parallel`).

Why it needs no new search: the chain pass (the first probe, the last cut) stays one job, since each piece reads
what the pieces before it produced on the target; it writes every boundary value it kept to one file in the
run's work folder and judges the cuts those values already cover. After it every probe is one piece truncated at
its cut, fed from that file, so the probes of a round are independent jobs; :mod:`.rounds` chooses them so that
the cuts walked are the serial search's (same probes, same first bad cut). With several slots the pieces are
planned within the budget's share of one slot (a piece too heavy for a share stands alone), so that several
probes fit the node's budget at once; each job asks the engine for its piece's memory (:mod:`.budget`).
Resume: every job's result is kept with a fingerprint of what it read (the piece's file, the model's data
files, the boundary values, the reference's and the floor's tensors it judges), so a rerun does only the rest.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..compare.thresholds import Thresholds
from ..parallel import Executor, Job
from ..progress import Progress
from ..runstore import Run
from .bisect_stream import boundary_shapes
from .budget import PROCESS_BASE, block_cost
from .cut import CutPoint
from .external import LazyModel, tensor_sizes
from .models import Probe
from .pieces import Chain, _weights, plan_chain, save_pieces, span, uses
from .rounds import first_bad_in_rounds
from .stream_baseline import hidden_bytes

FN = "qnn_debug.workers.bisect_jobs"
VALUES_FILE = "boundaries.npz"


def plan_shared(model: Any, budget: int, slots: int, hidden: int) -> Chain:
    """The serial plan's units, grouped within ``budget / slots`` each (a unit heavier than that alone), so that
    ``slots`` probes fit the budget together; the serial plan when even one unit does not fit a share."""
    chain = plan_chain(model, budget, hidden)  # refuses a unit that cannot fit the budget at all
    room = budget // max(1, slots) - PROCESS_BASE
    if slots <= 1 or room <= 0:
        return chain
    sizes = tensor_sizes(model)
    costs = [block_cost(_weights(model, sizes, u.positions), hidden) for u in chain.units]
    groups: list[list[int]] = []
    used = room + 1
    for i, cost in enumerate(costs):
        if cost > room or used + cost > room:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used = room + 1 if cost > room else used + cost
    last_use, consts, inits = uses(model)
    pieces = [span(model, [p for k in g for p in chain.units[k].positions], last_use, consts, inits) for g in groups]
    return Chain(pieces, chain.units, groups)


def _sha(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
    return h.hexdigest()


def _file_sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _model_stamp(lazy: LazyModel) -> str:
    """The model's data files as they are now (a rewritten file is another model)."""
    files = {lazy.base / e.value for t in lazy.model.graph.initializer for e in t.external_data if e.key == "location"}
    return _sha(sorted((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


def _tensors_sha(reference: Run, floor: Run | None, names: list[str]) -> str:
    h = hashlib.sha256()
    for run in (reference, floor):
        if run is None:
            continue
        for n in names:
            if run.has(n):
                a = np.ascontiguousarray(run.array(n))
                h.update(f"{n}|{a.dtype}|{a.shape}".encode())
                h.update(a.tobytes())
    return h.hexdigest()


def _point(p: CutPoint) -> dict[str, Any]:
    return {"index": p.index, "position": p.position, "op": p.op, "op_type": p.op_type, "frontier": list(p.frontier)}


def _width(executor: Executor, budget: int) -> int:
    """Probes per round: the cluster's CPUs (this machine's slots when embedded), at least 2."""
    slots = executor.slots
    if executor.name == "ray":
        from ..parallel.ray_engine import connect

        cluster = getattr(executor, "cluster", None)
        ray = connect(cluster, getattr(executor, "workers", slots), budget)
        slots = int(ray.cluster_resources().get("CPU", slots)) if cluster else slots
    return max(2, slots)


def run_chained(executor: Executor, lazy: LazyModel, reference: Run, floor: Run | None, feeds: dict[str, np.ndarray],
                points: list[CutPoint], *, budget: int, work: Path, store: Path, session: dict[str, Any],
                th: Thresholds, progress: Progress) -> tuple[int | None, list[Probe], dict[str, float], list[str]]:
    """The chain pass, then rounds of probes: (first bad cut, the serial search's probes, timings, warnings)."""
    from .. import fs
    from ..inputs import save_npz
    from ..versions import library_versions
    from ..workers.bisect_jobs import values_digest

    t0 = time.monotonic()
    hidden = hidden_bytes(feeds)
    chain = plan_shared(lazy.model, budget, executor.slots, hidden)
    pieces = save_pieces(lazy, chain, boundary_shapes(reference, feeds), work, "piece")
    warnings = [w for p in pieces for w in p.pop("lowered")]
    inputs_npz = save_npz(work / "inputs.npz", feeds)
    sizes = tensor_sizes(lazy.model)
    memory = [PROCESS_BASE + block_cost(_weights(lazy.model, sizes, b.positions), hidden) for b in chain.pieces]
    piece_sha = [_file_sha(p["model"]) for p in pieces]
    roots = fs.allowed_roots()
    env = {fs.ROOTS_ENV: os.pathsep.join(str(r) for r in roots)} if roots else {}
    op_types = {o: n.op_type for n in lazy.model.graph.node for o in n.output}
    stamp = _model_stamp(lazy)
    common = {**session, "external_dir": str(lazy.base), "reference": str(reference.dir),
              "floor": str(floor.dir) if floor is not None else None, "thresholds": th.model_dump(mode="json"),
              "versions": library_versions(), "values": str(store / VALUES_FILE)}

    def piece_of(position: int) -> int:
        return next(k for k, p in enumerate(pieces) if p["positions"][0] <= position <= p["positions"][1])

    last = points[-1]
    k_last = piece_of(last.position)
    kept = set(feeds) | {n for p in pieces[:k_last] for n in p["outputs"]}
    free = [p for p in points[:-1] if all(n in kept for n in p.frontier)]
    judged = list(dict.fromkeys(n for p in [*free, last] for n in p.frontier))
    chain_job = Job(key="chain", label="the chain of pieces (last cut)", fn=f"{FN}:chain", memory=max(memory), env=env,
                    args={**common, "pieces": pieces, "inputs_npz": str(inputs_npz), "last": _point(last),
                          "free": [_point(p) for p in free], "op_types": {n: op_types.get(n) for n in judged},
                          "digest": _sha(values_digest(feeds), piece_sha, stamp,
                                         _tensors_sha(reference, floor, judged))})
    timings = {"pieces": float(len(pieces)), "prepare_s": round(time.monotonic() - t0, 3)}
    t0 = time.monotonic()
    done = executor.run([chain_job], progress=progress, stage="bisect: the chain of pieces", store=store)[0]
    if not _intact(store / VALUES_FILE, done["values_digest"]):  # a kept answer whose boundary file is gone
        (store / f"{chain_job.key}.json").unlink(missing_ok=True)
        done = executor.run([chain_job], progress=progress, stage="bisect: the chain of pieces", store=store)[0]
    timings["htp_sim_pieces_s"] = float(done["pieces_s"])
    timings["chain_s"] = round(time.monotonic() - t0, 3)
    final = Probe.model_validate(done["final"])
    known = {int(i): Probe.model_validate(p) for i, p in done["free"].items()}
    width = _width(executor, budget)
    ran = [0]

    def run_round(indices: list[int], number: int) -> list[Probe]:
        jobs = []
        for i in indices:
            p = points[i]
            k = piece_of(p.position)
            jobs.append(Job(key=f"cut{i:05d}", label=f"the cut after {p.op}", fn=f"{FN}:probe", memory=memory[k],
                            env=env, args={**common, "piece": pieces[k], "point": _point(p),
                                           "values_digest": done["values_digest"],
                                           "op_types": {n: op_types.get(n) for n in p.frontier},
                                           "digest": _sha(piece_sha[k], stamp, done["values_digest"],
                                                          _tensors_sha(reference, floor, list(p.frontier)))}))
        ran[0] += len(jobs)
        results = executor.run(jobs, progress=progress, stage=f"bisect: round {number} ({len(jobs)} cuts)", store=store)
        return [Probe.model_validate({**r["probe"], "round": number}) for r in results]

    t0 = time.monotonic()
    first, probes, rounds = first_bad_in_rounds(len(points), final, run_round, th.excess_ok_db, width, known)
    timings.update({"rounds_s": round(time.monotonic() - t0, 3), "rounds": float(1 + rounds),
                    "workers": float(width), "free_cuts": float(len(known)),
                    "probes_run": float(1 + ran[0])})
    if executor.name == "ray":
        from ..parallel.ray_engine import started_s

        timings["engine_start_s"] = started_s() or 0.0
    return first, probes, timings, warnings


def _intact(path: Path, digest: str) -> bool:
    from ..workers.bisect_jobs import values_digest

    try:
        with np.load(path, allow_pickle=False) as stored:
            return values_digest({n: stored[n] for n in stored.files}) == digest
    except (OSError, ValueError):
        return False
