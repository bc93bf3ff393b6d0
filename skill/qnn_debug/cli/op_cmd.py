"""``qnn-debug op OP``: QNN/HTP constraints of an MNN OpType, ONNX op or QNN op, optionally probed on the simulator."""

from __future__ import annotations

import sys
from typing import Any

from .builder import op_command


def human(r: Any, request: Any) -> None:
    out = sys.stdout
    out.write(f"{r.query}  [{', '.join(r.kinds)}]\n")
    for m in r.mnn:
        emits = ", ".join(m.qnn_ops) if m.creator else "no QNN implementation (runs on CPU / cannot be converted)"
        out.write(f"  MNN {m.optype} ({m.number}): {emits}\n")
    if r.onnx_ops:
        out.write(f"  ONNX: {', '.join(r.onnx_ops)}\n")
    for q in r.qnn:
        out.write(f"  QNN {q.name}: inputs {q.inputs or '?'}; params {q.params or '(none)'}\n")
        for k, v in q.htp_support.items():
            out.write(f"    {k}: {v}\n")
    out.write("facts:\n")
    for f in r.facts:
        out.write(f"  - [{f.kind}] {f.text}\n      source: {f.source}\n")
    if r.sdk:
        out.write(f"SDK {r.sdk.root} (version {r.sdk.version or 'unknown'}); " + "; ".join(r.sdk.notes) + "\n")
    if r.probe:
        p = r.probe
        verdict = "ACCEPTED" if p.accepted else f"REJECTED at {p.stage}"
        out.write(f"probe {p.onnx_op} {', '.join(p.inputs)} {p.attributes or ''} on soc {p.soc_model}: {verdict}\n  {p.message}\n")
        for msg in p.qnn_messages[:8]:
            out.write(f"  qnn: {msg.strip()}\n")
        if p.rewrite is not None:
            rw = p.rewrite
            out.write(f"equivalent rewrite for the simulator run: {rw.description} ({' -> '.join(rw.nodes)}): "
                      f"{'ACCEPTED' if rw.accepted else 'REJECTED at ' + rw.stage}\n  {rw.message}\n")



op_command("op", "op_lookup", human, progress=lambda request, as_json: request.probe and not as_json, help_text=(
    "Which QNN op(s) MNN emits for OP, its inputs/params, HTP constraints, known traps — each with its source."))
