"""Worker: one HTP-simulator configuration, an unmarked and a mark-all run, every tensor saved.

One process per provider configuration, because QNN sessions in a process share the backend and a
later session inherits the first one's numerics. Both sessions here use the same options.

The unmarked run comes first: marking blocks graph fusions and can *change* the numerics (measured
on PP-OCR rec: 30.8 dB unmarked vs 40.2 dB marked), so the final outputs of both are kept and their
difference is recorded as the observer effect.

fp16 runs mark float16 views of the float32 tensors (``capture_dtype`` ``float16``, the default; see
:func:`qnn_debug.targets.onnx_capture.half_views`): 1.6-2.1x faster marked runs, same observer
effect, values are the float32 exports rounded to fp16. Views the Cast may have overflowed (NaN/Inf or ±65504)
are fetched again as float32 by a third session of the same graph with those tensors marked too.
``capture_dtype`` ``float32`` marks the float32 tensors themselves (always so for fp32 numerics).

Request: ``{"model", "out", "force", "inputs_npz", "record", "options", "precision",
"disabled_optimizers", "capture_dtype"}``; ``model`` is the shape-fixed ONNX file.
"""

from __future__ import annotations

import time
from typing import Any

from ..compare.metrics import SQNR_CAP_DB
from ..errors import QnnDebugError
from ..progress import Progress
from ..runstore import RunRecord, RunWriter

# SQNR reported for bit-identical outputs (the true value is +inf, which JSON cannot hold).
IDENTICAL_DB = SQNR_CAP_DB
# ``details["stage"]`` of an error raised while building the marked graph (``diagnose`` falls back on it).
MARKED_STAGE = "marked_session"


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import numpy as np
    import onnx

    from ..targets import qnn_ep
    from ..targets.onnx_capture import (
        capture_plan,
        half_views,
        mark_for_capture,
        needs_float32,
        qdq_points,
        serialize,
        write_plan,
    )

    model = onnx.load(request["model"])
    feeds = dict(np.load(request["inputs_npz"], allow_pickle=False))
    options: dict[str, str] = request["options"]
    disabled = list(request.get("disabled_optimizers") or [])
    quantized = request["precision"] == "quantized"
    capture_dtype = request.get("capture_dtype") or "float32"
    outputs = [o.name for o in model.graph.output]
    timings: dict[str, float] = {}

    with progress.stage("htp-sim: unmarked session", total=None, message="htp-sim: building the unmarked QNN graph"):
        t0 = time.monotonic()
        plain = qnn_ep.create_session(serialize(model), options, disabled_optimizers=disabled)
        timings["create_unmarked_s"] = time.monotonic() - t0
    with progress.stage("htp-sim: unmarked run", total=None, message="htp-sim: running the unmarked model"):
        t0 = time.monotonic()
        unmarked = dict(zip(outputs, _run(plain.session, outputs, feeds), strict=True))
        timings["run_unmarked_s"] = time.monotonic() - t0
    plain_log, plain_assignment = plain.log, plain.assignment
    del plain

    plan = capture_plan(model)
    points = qdq_points(model) if quantized else []
    marked_names = [] if quantized else [p.name for p in plan if p.kind != "input"]
    views = half_views(model, marked_names) if capture_dtype == "float16" else {}
    direct = [n for n in marked_names if n not in views]

    with progress.stage("htp-sim: marked session", total=None,
                        message=f"htp-sim: building the QNN graph with {len(marked_names) + len(points)} marked tensors"):
        t0 = time.monotonic()
        marked = mark_for_capture(model, direct, points, views=views)
        try:
            info = qnn_ep.create_session(serialize(marked), options, disabled_optimizers=disabled)
        except QnnDebugError as e:  # the unmarked graph built: say it is the marking that broke it
            e.details = {**e.details, "stage": MARKED_STAGE, "unmarked_ok": True}
            e.message = f"the marked (all-tensor) graph failed; the unmarked one built: {e.message}"
            raise
        timings["create_marked_s"] = time.monotonic() - t0
    wanted = [o.name for o in info.session.get_outputs()]
    with progress.stage("htp-sim: marked run", total=None, message="htp-sim: running the mark-all model"):
        t0 = time.monotonic()
        values = dict(zip(wanted, _run(info.session, wanted, feeds), strict=True))
        timings["run_marked_s"] = time.monotonic() - t0
    marked_log, marked_assignment, marked_count = info.log, info.assignment, info.qnn_node_count
    del info
    for name, view in views.items():
        if view in values:
            values[name] = values.pop(view)
    refetch = [n for n in views if n in values and needs_float32(values[n])]
    if refetch:
        with progress.stage("htp-sim: float32 re-run", total=None,
                            message=f"htp-sim: fetching {len(refetch)} tensor(s) beyond the fp16 range as float32"):
            t0 = time.monotonic()
            again = qnn_ep.create_session(serialize(mark_for_capture(model, [*direct, *refetch], points, views=views)),
                                          options, disabled_optimizers=disabled)
            values.update(zip(refetch, _run(again.session, refetch, feeds), strict=True))
            timings["refetch_s"] = time.monotonic() - t0
            marked_log += ["", "--- float32 re-run of the views beyond the fp16 range ---", *again.log]
            del again
    half = set(views) - set(refetch)

    record = RunRecord.model_validate(request["record"])
    record.assignment = marked_assignment
    effects = {n: _observer_effect(values[n], unmarked[n]) for n in outputs}
    record.observer_effect_db = {n: db for n, (db, _) in effects.items()}
    record.extra.update({
        "provider_options": options,
        "disabled_optimizers": disabled,
        "qnn_nodes": {"unmarked": _qnn_count(plain_assignment), "marked": marked_count},
        "capture": {"dtype": "quantized" if quantized else capture_dtype, "float16_views": len(half),
                    "refetched_as_float32": refetch},
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "observer_effect": {n: diff for n, (_, diff) in effects.items()},
        "unmarked_outputs_file": "unmarked_outputs.npz",
    })
    writer = RunWriter(request["out"], record, force=bool(request.get("force")))
    np.savez(writer.dir / "unmarked_outputs.npz", **unmarked)
    writer.write_log("qnn_unmarked.log", "\n".join(plain_log))
    writer.write_log("qnn_marked.log", "\n".join(marked_log))
    floats = {p.float_name for p in points}
    total = sum(p.kind != "activation" or p.name in floats for p in plan) if quantized else len(plan)
    with progress.stage("htp-sim: save", total=total, message="htp-sim: saving tensors") as advance:
        missing = write_plan(writer, plan, values, feeds, points=points, quantized_only=quantized, advance=advance,
                             half=half)
    if missing:
        record.warnings.append(f"{len(missing)} marked tensor(s) were not returned: {', '.join(missing[:10])}")
    writer.finish()
    return {"tensors": len(record.tensors), "qnn_nodes": marked_count}


def _run(session: Any, names: list[str], feeds: dict[str, Any]) -> list[Any]:
    from ..errors import TargetError
    from ..targets.onnx_capture import one_line

    try:
        return list(session.run(names, feeds))
    except Exception as e:  # fallback is disabled, so a failure here is the simulator's, never hidden
        raise TargetError(f"the HTP simulator failed to run the model: {one_line(e)}",
                          hint="see logs/ in the output directory for the QNN backend messages") from None


def _qnn_count(assignment: list[dict[str, Any]]) -> int:
    return sum(len(a["nodes"]) for a in assignment if a["provider"] == "QNNExecutionProvider")


def _observer_effect(test: Any, ref: Any) -> tuple[float, dict[str, Any]]:
    """Marked vs unmarked output by the project's one comparator, in float64: (SQNR in dB, capped at
    :data:`IDENTICAL_DB` for identical outputs, and -IDENTICAL_DB for an all-zero unmarked output;
    ``{"identical", "max_abs"}``)."""
    import numpy as np

    from ..compare.metrics import error_stats, sqnr_db

    stats = error_stats(np.asarray(test), np.asarray(ref), wide=True)
    return sqnr_db(stats.sum_r2, stats.sum_d2), {"identical": stats.identical, "max_abs": stats.max_abs_d}
