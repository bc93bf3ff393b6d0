"""The chained bisection's jobs for the parallel engine (:mod:`qnn_debug.localise.bisect_parallel`), run in a
worker process by name (:func:`qnn_debug.parallel.runner.run_job`).

- :func:`chain`: the first probe (the last cut) as the serial search runs it: the pieces before the last cut's
  piece once, in order, then that piece truncated at the cut; every boundary value kept is written to one file,
  and the cuts those values already cover are judged too (for free: no session);
- :func:`probe`: one cut: its piece truncated at the cut, fed from the boundary file.

A probe computes exactly what the serial worker's (:func:`.sim_probe_worker._bisect_chain`) computes for the
same cut: the same piece, truncated the same way, fed the same boundary values.
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .sim_probe_worker import _Chain


def values_digest(values: dict[str, Any]) -> str:
    """What a probe reads of the boundary file: every array's name, type, shape and bytes."""
    h = hashlib.sha256()
    for name in sorted(values):
        a = np.ascontiguousarray(np.asarray(values[name]))
        h.update(f"{name}|{a.dtype}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@lru_cache(maxsize=2)
def _boundaries(path: str, digest: str) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as stored:
        return {n: stored[n] for n in stored.files}


@lru_cache(maxsize=4)
def _load_run(path: str, stamp: int) -> Any:
    from ..runstore import load_run

    return load_run(path)


def _run_dir(path: str) -> Any:
    """A baseline run, opened once per worker process while its record is unchanged."""
    return _load_run(path, (Path(path) / "run.json").stat().st_mtime_ns)


def _judge(args: dict[str, Any], point: dict[str, Any], values: list[Any], seconds: float) -> dict[str, Any]:
    from ..compare.thresholds import Thresholds
    from ..localise.probe import judge, summarise

    th = Thresholds.model_validate(args["thresholds"])
    reference = _run_dir(args["reference"])
    floor = _run_dir(args["floor"]) if args.get("floor") else None
    op_types = args.get("op_types") or {}
    names = list(point["frontier"])
    tensors = [judge(n, v, reference.array(n), floor.array(n) if floor is not None and floor.has(n) else None,
                     op_types.get(n), th) for n, v in zip(names, values, strict=True)]
    p = summarise(point["index"], point["position"], point["op"], point["op_type"], tensors, seconds)
    return p.model_dump(mode="json")


def _truncated(chain: _Chain, k: int, names: list[str]) -> dict[str, Any]:
    from ..localise.cut import truncate

    fresh = [n for n in names if n not in chain.values]
    return chain.run(truncate(chain.model(k), fresh), fresh) if fresh else {}


def chain(args: dict[str, Any]) -> dict[str, Any]:
    """The last cut's probe through the chain; the boundary values saved (``args["values"]``); the ``free`` cuts
    (those the boundary values cover) judged from them."""
    t0 = time.monotonic()
    feeds = dict(np.load(args["inputs_npz"], allow_pickle=False))
    ch = _Chain(args, feeds, args["pieces"])
    last = args["last"]
    k = ch.piece_of(last["position"])
    ch.through(k)
    names = list(last["frontier"])
    got = _truncated(ch, k, names)
    final = _judge(args, last, [got[n] if n in got else ch.values[n] for n in names], time.monotonic() - t0)
    final_s = time.monotonic() - t0
    free = {}
    for point in args["free"]:
        if all(n in ch.values for n in point["frontier"]):
            free[str(point["index"])] = _judge(args, point, [ch.values[n] for n in point["frontier"]], 0.0)
    path = Path(args["values"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.npz")
    np.savez(tmp, **{n: np.asarray(v) for n, v in ch.values.items()})  # type: ignore[arg-type]
    tmp.replace(path)
    return {"final": final, "free": free, "values_digest": values_digest(ch.values), "pieces_run": ch.reached,
            "pieces_s": round(ch.sim_s, 3), "final_s": round(final_s, 3)}


def probe(args: dict[str, Any]) -> dict[str, Any]:
    """One cut: its piece truncated at the cut, fed the boundary values the chain pass kept."""
    t0 = time.monotonic()
    values = _boundaries(args["values"], args["values_digest"])
    ch = _Chain(args, values, [args["piece"]])
    point = args["point"]
    names = list(point["frontier"])
    got = _truncated(ch, 0, names)
    out = _judge(args, point, [got[n] if n in got else values[n] for n in names], time.monotonic() - t0)
    return {"probe": out, "sim_s": round(ch.sim_s, 3)}
