"""``qnn-debug op OP``: QNN/HTP constraints of an MNN OpType, ONNX op or QNN op, optionally probed on the simulator."""

from __future__ import annotations

import sys

import typer

from ..errors import QnnDebugError
from ..mnn.soc import DEFAULT_SOC, default_soc_help
from .app import app
from .common import JSON_OPTION, cli_progress, emit, fail


@app.command("op")
def op(
    name: str = typer.Argument(..., help="MNN OpType name or number (e.g. 17), ONNX op (Conv) or QNN op (Conv2d)."),
    probe: bool = typer.Option(False, "--probe", help="Also try the op on the HTP simulator (one-op ONNX graph)."),
    shape: list[str] = typer.Option([], "--shape", help="Probe input DIMS[:DTYPE][=V1,...], once per input (later inputs become constants)."),
    attr: list[str] = typer.Option([], "--attr", help="Probe ONNX attribute key=value (lists as 1,1)."),
    sdk: str | None = typer.Option(None, "--sdk", help="QNN/QAIRT SDK root (default: $QNN_SDK_ROOT)."),
    soc: int = typer.Option(DEFAULT_SOC, "--soc", help=f"soc_model for the probe ({default_soc_help()}; 30 = fp32-accurate check)."),
    opset: int = typer.Option(20, "--opset", help="ONNX opset of the probe graph."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Which QNN op(s) MNN emits for OP, its inputs/params, HTP constraints, known traps — each with its source."""
    from ..ops import OpConstraints, lookup_op_constraints

    try:
        with cli_progress(enabled=probe and not json_out) as progress:
            result = lookup_op_constraints(name, sdk=sdk, probe=probe, shapes=shape, attrs=attr, soc_model=soc,
                                           opset=opset, progress=progress)
    except QnnDebugError as e:
        fail(e, json_out)
        return

    def human(r: OpConstraints = result) -> None:
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

    emit(result, json_out, human)
