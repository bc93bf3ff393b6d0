"""Jobs of the streamed chunked marking (``diagnose`` on a model too large for one simulator session), one simulator
session each, run by the parallel engine (:mod:`qnn_debug.parallel`) in any worker process.

- :func:`unmarked_unit`: one unit (a decoder layer, or the ops between layers) unmarked, fed what the unmarked units
  before it produced (read from their files), its outputs written to its own file: the production graph's values,
  unit by unit, as a chain of jobs;
- :func:`marked_unit`: the same unit with its tensors marked, fed the same unmarked values, so the marked units do
  not wait for each other, only for the unmarked chain to reach them; its captured tensors and outputs go to its own
  file. Its outputs against the unmarked unit's (same inputs) are the unit's own observer effect.

A graph that does not build when marked is split in halves until the tensors that break it stand alone; those are
skipped, with every later tensor made the same way: of this unit, and (through the kinds file each marked job
writes) of the units whose marked jobs wait for this one.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .sim_probe_worker import _signatures, run_fed


def _feeds(sources: dict[str, str]) -> dict[str, Any]:
    """The unit's inputs, each from the file that holds it (the inputs' file, or an earlier unit's)."""
    import numpy as np

    by_file: dict[str, list[str]] = {}
    for name, path in sources.items():
        by_file.setdefault(path, []).append(name)
    feeds: dict[str, Any] = {}
    for path, names in by_file.items():
        with np.load(path, allow_pickle=False) as stored:
            feeds.update({n: stored[n] for n in names})
    return feeds


def _save(path: str, values: dict[str, Any]) -> None:
    """Written whole or not at all (a job killed mid-write leaves no file a rerun would trust)."""
    import numpy as np

    tmp = f"{path}.part"
    with open(tmp, "wb") as f:
        np.savez(f, **{n: np.asarray(v) for n, v in values.items()})  # type: ignore[arg-type]
    os.replace(tmp, path)


class _Unit:
    """One unit's graph (weights left in the model's data file) and its session runs, timed."""

    def __init__(self, args: dict[str, Any]):
        import onnx

        self.args = args
        self.model = onnx.load(args["unit"]["model"], load_external_data=False)
        self.feeds = _feeds(args["sources"])
        self.outputs: list[str] = list(args["unit"]["outputs"])
        self.sim_s = 0.0

    def run(self, model: Any, names: list[str]) -> dict[str, Any]:
        t0 = time.monotonic()
        try:  # a session that fails to build is simulator time too
            return run_fed(model, names, self.feeds, self.args)
        finally:
            self.sim_s += time.monotonic() - t0


def unmarked_unit(args: dict[str, Any]) -> dict[str, Any]:
    """Unit ``args["unit"]`` unmarked; its outputs saved in ``args["out"]``."""
    started = time.time()
    unit = _Unit(args)
    _save(args["out"], unit.run(unit.model, unit.outputs))
    return {"files": [args["out"]], "sim_s": round(unit.sim_s, 3), "span": [started, time.time()]}


def marked_unit(args: dict[str, Any]) -> dict[str, Any]:
    """Unit ``args["unit"]`` with its planned tensors (``args["names"]``) marked; what was captured and the unit's
    outputs saved in ``args["out"]``."""
    import json

    from ..errors import QnnDebugError
    from ..targets.onnx_capture import mark_for_capture

    t0 = time.monotonic()
    unit = _Unit(args)
    outs = unit.outputs
    signature = _signatures(unit.model)
    unmarkable: list[str] = []
    bad_kinds: set[tuple[str, ...]] = set()
    for path in args.get("kinds_from") or []:  # what the units this one waited for found
        with open(path, encoding="utf-8") as f:
            bad_kinds.update(tuple(k) for k in json.load(f))

    def capture(names: list[str]) -> dict[str, Any]:
        names = [n for n in names if signature.get(n) not in bad_kinds]
        try:
            return unit.run(mark_for_capture(unit.model, [*names, *outs], []), list(dict.fromkeys([*names, *outs])))
        except QnnDebugError:
            if len(names) <= 1:
                unmarkable.extend(names)
                bad_kinds.update(signature.get(n, (n,)) for n in names)
                return unit.run(unit.model, outs)
            half = len(names) // 2
            return {**capture(names[:half]), **capture(names[half:])}

    got = capture(list(args["names"]))
    _save(args["out"], got)
    kinds = f"{args['out']}.kinds.json"
    tmp = f"{kinds}.part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(sorted(bad_kinds), f)
    os.replace(tmp, kinds)
    return {"files": [args["out"], kinds], "sim_s": round(unit.sim_s, 3), "unmarkable": unmarkable,
            "seconds": round(time.monotonic() - t0, 3)}
