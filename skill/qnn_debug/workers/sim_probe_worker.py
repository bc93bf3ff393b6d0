"""Worker: many small unmarked HTP-simulator sessions of one provider configuration in one process.

Two jobs, both without marking anything (so no observer effect):
- ``bisect``: the whole search runs here (each probe needs the previous probe's answer, and a fresh
  process per probe would cost more than the probe): truncate the model at a cut, run it, judge the
  frontier against the baseline's reference and floor, narrow, repeat;
- block groups (:mod:`qnn_debug.localise.block_jobs`) judge their side-by-side sessions with :func:`_judge_pieces`;
- ``values``: one cut model run unmarked, its outputs saved (``HtpSimTarget.prober``: one probe, no judging);
- ``chunked``: the unmarked model, then one session per chunk of tensors, each marking only that chunk
  (a run directory like a dump's; each chunk's outputs are checked against the unmarked run).

All sessions share the options, so sharing the process's QNN backend is harmless.
"""

from __future__ import annotations

import time
from typing import Any

from ..progress import Progress


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    if request["job"] == "bisect":
        return _bisect(request, progress)
    if request["job"] == "bisect_chain":
        return _bisect_chain(request, progress)
    if request["job"] == "chunked":
        return _chunked(request, progress)
    if request["job"] == "values":
        return _values(request)
    raise ValueError(f"unknown job {request['job']!r}")


def _session(model: Any, request: dict[str, Any], external_dir: str | None = None) -> Any:
    """A simulator session of ``model``; one that cannot be made raises an error holding nothing of it (see
    :func:`_forget_frames`)."""
    from ..errors import QnnDebugError
    from ..targets import qnn_ep
    from ..targets.onnx_capture import serialize

    try:
        return qnn_ep.create_session(serialize(model), request["options"],
                                     disabled_optimizers=list(request.get("disabled_optimizers") or []), verbose=False,
                                     external_data_dir=external_dir)
    except QnnDebugError as e:
        _forget_frames(e)
        del model
        raise


def _forget_frames(error: BaseException) -> None:
    """Clear the finished frames of ``error``'s traceback and of the errors it was raised from. Those frames held the
    model's serialised bytes and ONNX Runtime's half-built session (the QNN graph that failed to finalize, with its
    weights) for as long as the error lived; marking that splits a chunk inside its ``except`` (halving down to
    the tensor that breaks the graph) kept every level's: a 1-layer block at 0.6B width grew its worker by ~170 MB
    a failed session, to 2 GiB (1.7B width: 6 GiB)."""
    import traceback

    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    error.__context__ = None  # raised "from None": never shown, only kept alive


def _run(session: Any, names: list[str], feeds: dict[str, Any]) -> list[Any]:
    from ..errors import TargetError
    from ..targets.onnx_capture import one_line

    try:
        return list(session.run(names, feeds))
    except Exception as e:  # fallback is disabled: a failure here is the simulator's
        raise TargetError(f"the HTP simulator failed to run a probe: {one_line(e)}",
                          hint="run `qnn-debug dump` on the model to see the QNN backend messages") from None


def run_fed(model: Any, names: list[str], values: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """``names`` from one simulator session of ``model``, fed the entries of ``values`` it takes as inputs; the
    session is gone when this returns (a piece at a time, so the worker holds one piece's QNN graph at most)."""
    wanted = {v.name for v in model.graph.input}
    info = _session(model, request, request.get("external_dir"))
    return dict(zip(names, _run(info.session, names, {k: v for k, v in values.items() if k in wanted}), strict=True))


def _bisect(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import numpy as np
    import onnx

    from ..compare.thresholds import Thresholds
    from ..localise.cut import CutPoint, truncate
    from ..localise.probe import first_bad, judge, summarise
    from ..onnx_graph import producer_map
    from ..runstore import load_run

    model = onnx.load(request["model"])
    feeds = dict(np.load(request["inputs_npz"], allow_pickle=False))
    reference = load_run(request["reference"])
    floor = load_run(request["floor"]) if request.get("floor") else None
    points = [CutPoint(**p) for p in request["points"]]
    th = Thresholds.model_validate(request.get("thresholds") or {})
    op_types = {name: node.op_type for name, node in producer_map(model).items()}
    with progress.stage("bisect: probes", total=None, message="bisect: probing cuts on the HTP simulator") as advance:

        def probe(i: int) -> Any:
            t0 = time.monotonic()
            point = points[i]
            names = list(point.frontier)
            cut = truncate(model, names)
            wanted = {v.name for v in cut.graph.input}
            info = _session(cut, request)
            values = _run(info.session, names, {k: v for k, v in feeds.items() if k in wanted})
            del info
            tensors = [judge(n, v, reference.array(n), floor.array(n) if floor is not None and floor.has(n) else None,
                             op_types.get(n), th) for n, v in zip(names, values, strict=True)]
            p = summarise(i, point.position, point.op, point.op_type, tensors, time.monotonic() - t0)
            advance(message=f"bisect: cut after {point.op} is {'bad' if p.bad else 'good'}")
            return p

        first, probes = first_bad(len(points), probe, th.excess_ok_db)
    return {"first": first, "probes": [p.model_dump(mode="json") for p in probes]}


class _Chain:
    """A model's pieces run in order on the simulator, each fed what the pieces before it produced; every value a
    later piece reads is kept (the boundaries: a few MB at LLM size), one piece's session at a time."""

    def __init__(self, request: dict[str, Any], feeds: dict[str, Any], pieces: list[dict[str, Any]]):
        self.request, self.pieces = request, pieces
        self.values: dict[str, Any] = dict(feeds)
        self.reached = 0
        self.sim_s = 0.0

    def model(self, k: int) -> Any:
        import onnx

        return onnx.load(self.pieces[k]["model"], load_external_data=False)  # weights stay in the original file

    def run(self, model: Any, names: list[str]) -> dict[str, Any]:
        t0 = time.monotonic()
        try:  # a session that fails to build is simulator time too
            return run_fed(model, names, self.values, self.request)
        finally:
            self.sim_s += time.monotonic() - t0

    def through(self, k: int) -> None:
        """Every piece before ``k`` has run."""
        while self.reached < k:
            piece = self.pieces[self.reached]
            self.values.update(self.run(self.model(self.reached), list(piece["outputs"])))
            self.reached += 1

    def piece_of(self, position: int) -> int:
        return next(k for k, p in enumerate(self.pieces) if p["positions"][0] <= position <= p["positions"][1])


def _bisect_chain(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """The bisection of :func:`_bisect` on a model cut into pieces: a probe's values are the whole model's (the
    pieces before the cut's piece run once, in order), the cut's piece truncated at the cut."""
    import numpy as np

    from ..compare.thresholds import Thresholds
    from ..localise.cut import CutPoint, truncate
    from ..localise.probe import first_bad, judge, summarise
    from ..runstore import load_run

    feeds = dict(np.load(request["inputs_npz"], allow_pickle=False))
    chain = _Chain(request, feeds, request["pieces"])
    reference = load_run(request["reference"])
    floor = load_run(request["floor"]) if request.get("floor") else None
    points = [CutPoint(**p) for p in request["points"]]
    th = Thresholds.model_validate(request.get("thresholds") or {})
    with progress.stage("bisect: probes", total=None, message="bisect: probing cuts on the HTP simulator, piece by "
                        "piece") as advance:

        def probe(i: int) -> Any:
            t0 = time.monotonic()
            point = points[i]
            names = list(point.frontier)
            k = chain.piece_of(point.position)
            chain.through(k)
            fresh = [n for n in names if n not in chain.values]
            got = chain.run(truncate(chain.model(k), fresh), fresh) if fresh else {}
            values = [got[n] if n in got else chain.values[n] for n in names]
            op_types = request.get("op_types") or {}
            tensors = [judge(n, v, reference.array(n), floor.array(n) if floor is not None and floor.has(n) else None,
                             op_types.get(n), th) for n, v in zip(names, values, strict=True)]
            p = summarise(i, point.position, point.op, point.op_type, tensors, time.monotonic() - t0)
            advance(message=f"bisect: cut after {point.op} is {'bad' if p.bad else 'good'} (piece {k + 1}/"
                            f"{len(chain.pieces)})")
            return p

        first, probes = first_bad(len(points), probe, th.excess_ok_db)
    return {"first": first, "probes": [p.model_dump(mode="json") for p in probes], "pieces_s": round(chain.sim_s, 3)}


def _values(request: dict[str, Any]) -> dict[str, Any]:
    """Run one (already cut) model and save its ``outputs`` as ``v0, v1, ...`` in ``request["values"]``."""
    import numpy as np
    import onnx

    model = onnx.load(request["model"])
    feeds = dict(np.load(request["inputs_npz"], allow_pickle=False))
    names = list(request["outputs"])
    info = _session(model, request)
    got = _run(info.session, names, feeds)
    del info
    np.savez(request["values"], **{f"v{i}": np.asarray(v) for i, v in enumerate(got)})  # type: ignore[arg-type]
    return {"values": request["values"]}


def _judge_pieces(stage: dict[str, Any], request: dict[str, Any], th: Any) -> list[list[dict[str, Any]]]:
    """Run one side-by-side model; judge each piece's outputs (reference and floor arrays by renamed name)."""
    import numpy as np
    import onnx

    from ..localise.probe import judge

    model = onnx.load(stage["model"], load_external_data=False)  # weights stay in the original file
    feeds = dict(np.load(stage["feeds"], allow_pickle=False))
    ref = np.load(stage["reference"], allow_pickle=False)
    floor = np.load(stage["floor"], allow_pickle=False)
    names = [o.name for o in model.graph.output]
    info = _session(model, request, stage.get("external_dir"))
    got = dict(zip(names, _run(info.session, names, feeds), strict=True))
    del info
    keys = stage["keys"]
    judged = []
    for piece in stage["pieces"]:
        judged.append([judge(orig, got[new], ref[keys[new]], floor[keys[new]] if keys[new] in floor.files else None,
                             piece["op_types"].get(orig), th).model_dump(mode="json")
                       for orig, new in piece["outputs"].items()])
    return judged


def _chunked(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import numpy as np
    import onnx

    from ..errors import QnnDebugError
    from ..runstore import RunRecord, RunWriter
    from ..targets.onnx_capture import capture_plan, mark_for_capture, write_plan
    from .htp_worker import _observer_effect

    model = onnx.load(request["model"])
    feeds = dict(np.load(request["inputs_npz"], allow_pickle=False))
    outputs = [o.name for o in model.graph.output]
    groups: list[list[str]] = request["groups"]
    plain = _session(model, request)
    unmarked = dict(zip(outputs, _run(plain.session, outputs, feeds), strict=True))
    del plain
    values: dict[str, Any] = {}
    chunks: list[dict[str, Any]] = []
    signature = _signatures(model)
    unmarkable: list[str] = []
    bad_kinds: set[tuple[str, ...]] = set()
    worst_chunk: dict[str, Any] = {}  # the marked outputs of the chunk that moved them most

    def capture(names: list[str], index: int) -> None:
        """Mark ``names`` in one session; when the graph does not build, split in halves until the tensors
        that break it stand alone; they are skipped, and so is every later tensor made the same way."""
        names = [n for n in names if signature.get(n) not in bad_kinds]
        if not names:
            return
        t0 = time.monotonic()
        try:
            info = _session(mark_for_capture(model, names, []), request)
        except QnnDebugError:
            if len(names) == 1:
                unmarkable.append(names[0])
                bad_kinds.add(signature.get(names[0], (names[0],)))
                return
            half = len(names) // 2
            capture(names[:half], index)
            capture(names[half:], index)
            return
        wanted = [o.name for o in info.session.get_outputs()]
        got = dict(zip(wanted, _run(info.session, wanted, feeds), strict=True))
        del info
        effect = {n: _observer_effect(got[n], unmarked[n])[0] for n in outputs}
        chunks.append({"index": index, "tensors": len(names), "first": names[0], "last": names[-1],
                       "seconds": round(time.monotonic() - t0, 3), "observer_effect_db": effect})
        if not worst_chunk or min(effect.values()) < worst_chunk["db"]:
            worst_chunk.update(db=min(effect.values()), outputs={n: got[n] for n in outputs})
        values.update({n: got[n] for n in names if n in got and n not in unmarked})

    with progress.stage("htp-sim: chunks", total=len(groups), message="htp-sim: marked sessions, one chunk each") as advance:
        for i, names in enumerate(groups):
            capture(names, i)
            advance()
    values.update(unmarked)
    record = RunRecord.model_validate(request["record"])
    record.observer_effect_db = {n: min(c["observer_effect_db"][n] for c in chunks) if chunks else 200.0
                                 for n in outputs}
    record.extra.update({"provider_options": request["options"], "capture": {"dtype": "float32", "method": "chunked"},
                         "chunks": chunks, "unmarkable": unmarkable})
    if unmarkable:
        record.warnings.append(f"{len(unmarkable)} tensor(s) break the graph when marked and were not captured "
                               f"(their ops are judged through their consumers): {', '.join(unmarkable[:6])}")
    record.extra["marked_outputs_file"] = "worst_chunk_outputs.npz"
    writer = RunWriter(request["out"], record, force=bool(request.get("force")))
    np.savez(writer.dir / "worst_chunk_outputs.npz", **(worst_chunk.get("outputs") or unmarked))
    missing = write_plan(writer, capture_plan(model), values, feeds)
    if missing:
        record.warnings.append(f"{len(missing)} tensor(s) were in no chunk: {', '.join(missing[:10])}")
    writer.finish()
    return {"tensors": len(record.tensors), "chunks": len(chunks)}


def _signatures(model: Any) -> dict[str, tuple[str, ...]]:
    """Tensor -> (op type, op types of the ops feeding it): how the tensor is made, for "same kind" skips."""
    producer = {o: n for n in model.graph.node for o in n.output}
    return {o: (n.op_type, *(producer[i].op_type if i in producer else "-" for i in n.input))
            for n in model.graph.node for o in n.output}
