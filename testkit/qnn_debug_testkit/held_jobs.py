"""Jobs a test can hold, time and kill, for the parallel engine's tests (``qnn_debug.parallel``).

``held`` wraps a real job: it writes its worker's pid (``pids/<key>.<pid>``), waits until its gate file
(``gates/<key>``) exists, then runs the inner job; the test kills the pid while it waits, as an OOM killer or an
operator would. ``timed`` sleeps and reports when it ran, to measure how many jobs ran at once; ``file_step``
reads the files its ``after`` jobs wrote and writes its own.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from qnn_debug.parallel import Job

HOLD_LIMIT_S = 120.0


def held(args: dict[str, Any]) -> dict[str, Any]:
    pids, gate = Path(args["pids"]), Path(args["gates"]) / args["key"]
    pids.mkdir(parents=True, exist_ok=True)
    (pids / f"{args['key']}.{os.getpid()}").write_text(str(time.time()), encoding="utf-8")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    module, _, name = args["inner"].partition(":")
    result: dict[str, Any] = getattr(importlib.import_module(module), name)(args["inner_args"])
    return result


def hold(job: Job, pids: Path, gates: Path) -> Job:
    """``job`` run through :func:`held` (same key, label and memory)."""
    return replace(job, fn=f"{__name__}:held", args={"inner": job.fn, "inner_args": job.args, "key": job.key,
                                                     "pids": str(pids), "gates": str(gates)})


def started(pids: Path, key: str) -> list[int]:
    """Pids of the workers that started ``key``, oldest first."""
    files = sorted(pids.glob(f"{key}.*"), key=lambda p: float(p.read_text(encoding="utf-8") or 0))
    return [int(p.suffix[1:]) for p in files]


def timed(args: dict[str, Any]) -> dict[str, Any]:
    t0 = time.time()
    time.sleep(float(args["seconds"]))
    return {"start": t0, "end": time.time(), "pid": os.getpid()}


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` spans that overlap."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def file_step(args: dict[str, Any]) -> dict[str, Any]:
    """A job that passes data through files, as the chunked-marking jobs do: sleeps ``seconds``, reads every file
    of ``reads`` (which must exist: its ``after`` jobs wrote them), writes ``out`` (what it read, then its own
    ``key``) and appends one line to ``log`` per run. With ``fail_if`` an existing file, it fails instead."""
    if args.get("fail_if") and Path(args["fail_if"]).exists():
        raise RuntimeError(f"{args['key']} told to fail")
    time.sleep(float(args.get("seconds", 0.0)))
    read = [Path(p).read_text(encoding="utf-8") for p in args.get("reads", [])]
    Path(args["out"]).write_text(" ".join([*read, args["key"]]), encoding="utf-8")
    with open(args["log"], "a", encoding="utf-8") as f:
        f.write(f"{args['key']} {time.time()} {os.getpid()}\n")
    return {"files": [args["out"]]}
