"""``qnn-debug triage [FILE|-]`` and ``qnn-debug case-add``: classify a log; write a solved case back.

Imports nothing heavy: triage must answer in well under a second for ordinary logs.
"""

from __future__ import annotations

import sys
from typing import Any

from .builder import op_command


def human_triage(r: Any, request: Any) -> None:
    out = sys.stdout
    out.write(f"{r.category}  (confidence {r.confidence:.2f}, read from {r.basis}) — {r.title}\n")
    if r.low_confidence:
        out.write(f"LOW CONFIDENCE: {r.low_confidence_reason}\n")
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
    if r.similar.threads:
        lean = " (they gave the category: no rule named a failure)" if r.similar.decided else ""
        out.write(f"similar public threads{lean}:\n" + "".join(
            f"  - {t.url}  {t.category}, similarity {t.similarity:.2f}"
            + (f", shared: {' '.join(t.shared_terms[:4])}" if t.shared_terms else "") + "\n" for t in r.similar.threads))
    if len(r.hypotheses) > 1:
        out.write("other hypotheses: " + ", ".join(f"{h.category} ({h.score:g})" for h in r.hypotheses[1:]) + "\n")
    if r.noise:
        out.write("ignored noise: " + ", ".join(f"{n.id} x{n.count}" for n in r.noise) + "\n")
    for w in r.warnings:
        out.write(f"warning: {w}\n")


def human_case(r: Any, request: Any) -> None:
    sys.stdout.write(f"added case {len(r.records)} to {r.path}\n")
    for w in r.warnings:
        sys.stdout.write(f"warning: {w}\n")


op_command("triage", "triage", human_triage,
           help_text="Read a log of any size and say which QNN failure it shows, why, and which tool to run next.")
op_command("case-add", "case_add", human_case, help_text=(
    "Append one solved case to the cases file; the next `qnn-debug triage` shows it when the log matches."))
