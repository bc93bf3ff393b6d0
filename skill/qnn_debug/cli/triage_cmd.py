"""``qnn-debug triage [FILE|-]`` and ``qnn-debug case-add``: classify a log; write a solved case back.

Imports nothing heavy: triage must answer in well under a second for ordinary logs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .. import fs
from ..errors import QnnDebugError
from .app import app
from .common import JSON_OPTION, emit, fail

CASES_HELP = ("Cases file of past solved problems (JSON lines, see `qnn-debug case-add`); default: "
              "qnn-debug-cases.jsonl in the current directory when it exists.")


def _default_cases(cases: str | None) -> str | None:
    if cases is not None:
        return cases
    from ..triage.cases import DEFAULT_NAME

    return DEFAULT_NAME if Path(DEFAULT_NAME).is_file() else None


@app.command("triage")
def triage(
    log: str = typer.Argument("-", help="Log file (MNN stdout, QNN/ORT log, logcat, gdb backtrace); '-' reads stdin."),
    cases: str | None = typer.Option(None, "--cases", help=CASES_HELP),
    json_out: bool = JSON_OPTION,
) -> None:
    """Read a log of any size and say which QNN failure it shows, why, and which tool to run next."""
    from ..triage import TriageResult, triage_log

    try:
        if log != "-":  # inside --root, a regular file: a FIFO or device would hang the scan
            fs.check(log, what="log file", kind="file")
        result = triage_log(log, cases=_default_cases(cases))
    except QnnDebugError as e:
        fail(e, json_out)
        return

    def human(r: TriageResult = result) -> None:
        out = sys.stdout
        out.write(f"{r.category}  (confidence {r.confidence:.2f}) — {r.title}\n")
        out.write(f"playbook: {r.playbook}\n")
        for k in r.known_cases:
            out.write(f"known case {k.date} (line {k.line}): {k.cause}\n  fix: {k.fix}\n")
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


@app.command("case-add")
def case_add(
    category: str = typer.Option(..., "--category", help="Triage category of the solved problem (e.g. convert_segfault)."),
    match: str = typer.Option(..., "--match", help="A literal log line (or part of one) that identifies this problem."),
    cause: str = typer.Option(..., "--cause", help="One sentence: what it really was."),
    fix: str = typer.Option(..., "--fix", help="One sentence: what fixed it (command, flag, patch)."),
    source: str = typer.Option("", "--source", help="Issue URL, commit or run that confirmed it."),
    cases: str = typer.Option("qnn-debug-cases.jsonl", "--cases", help="Cases file to append to (created if absent)."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Append one solved case to the cases file; the next `qnn-debug triage` shows it when the log matches."""
    from pydantic import ValidationError

    from ..errors import BadInputError
    from ..triage.cases import CaseFile, CaseRecord, append_case

    try:
        try:
            record = CaseRecord(category=category, match=match, cause=cause, fix=fix, source=source)
        except ValidationError as e:
            first = e.errors()[0]
            raise BadInputError(f"bad case: {first['loc'][0] if first['loc'] else ''} {first['msg']}",
                                hint="see `qnn-debug case-add --help`") from None
        result = append_case(cases, record)
    except QnnDebugError as e:
        fail(e, json_out)
        return

    def human(r: CaseFile = result) -> None:
        sys.stdout.write(f"added case {len(r.records)} to {r.path}\n")
        for w in r.warnings:
            sys.stdout.write(f"warning: {w}\n")

    emit(result, json_out, human)
