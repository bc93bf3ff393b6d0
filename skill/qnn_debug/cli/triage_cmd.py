"""``qnn-debug triage [FILE|-]``: name the class of a QNN failure from a log, with evidence and next steps.

Imports nothing heavy: triage must answer in well under a second for ordinary logs.
"""

from __future__ import annotations

import sys

import typer

from ..errors import QnnDebugError
from .app import app
from .common import JSON_OPTION, emit, fail


@app.command("triage")
def triage(
    log: str = typer.Argument("-", help="Log file (MNN stdout, QNN/ORT log, logcat, gdb backtrace); '-' reads stdin."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Read a log of any size and say which QNN failure it shows, why, and which tool to run next."""
    from ..triage import TriageResult, triage_log

    try:
        result = triage_log(log)
    except QnnDebugError as e:
        fail(e, json_out)
        return

    def human(r: TriageResult = result) -> None:
        out = sys.stdout
        out.write(f"{r.category}  (confidence {r.confidence:.2f}) — {r.title}\n")
        out.write(f"playbook: {r.playbook}\n")
        if r.evidence:
            out.write("evidence:\n")
            for e in r.evidence[:10]:
                out.write(f"  {e.line:>7}: {e.text}\n")
        if r.facts:
            out.write("facts:\n" + "".join(f"  - {f}\n" for f in r.facts))
        out.write("next steps:\n" + "".join(f"  - {s.cli}    # {s.why}\n" for s in r.next_steps))
        if len(r.hypotheses) > 1:
            out.write("other hypotheses: " + ", ".join(f"{h.category} ({h.score:g})" for h in r.hypotheses[1:]) + "\n")
        if r.noise:
            out.write("ignored noise: " + ", ".join(f"{n.id} x{n.count}" for n in r.noise) + "\n")
        for w in r.warnings:
            out.write(f"warning: {w}\n")

    emit(result, json_out, human)
