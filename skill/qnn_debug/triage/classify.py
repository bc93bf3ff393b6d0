"""Log triage: stream a log of any size, match data-file signatures, rank categories, return evidence.

This module only orchestrates; each job has its module: :mod:`.stream` reads the log in bounded chunks,
:mod:`.scan` matches signatures and readers on them, :mod:`.votes` collects and weighs the votes by the labelling
rule book, :mod:`.ranking` tallies and picks the category, :mod:`.facts` decodes what the lines name,
:mod:`.steps` says what to run next, and :mod:`.weights` holds every tuned limit and weight.
This package imports nothing heavy (``qnn-debug triage`` must start fast).

Deciding follows the labelling rule book: what stops the run wins over a warning the run went on from, a clear
error keeps the label over the crash it caused, and the reporter's own words decide only where the log's lines do
not. ``basis`` says which kind of reading decided (signature, words, structure, similar, none) and
``low_confidence_reason`` what would settle a weak answer.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO

from ..errors import BadInputError
from .cases import CaseMatcher, read_cases
from .commands import command_facts
from .facts import decode_facts, frame_facts
from .models import Evidence, Hypothesis, NoiseHit, TriageResult, TriageStats
from .ranking import Answer, Tally, add_export_readings, add_similar, add_structure_and_frames, rank
from .scan import CALL_NOTE, Scan, scan_chunks
from .signatures import SignatureDB, load_signatures
from .similar import SimilarFeed, SimilarIndex, SimilarOpinion, shown
from .steps import first_per, plan_next_steps
from .stream import chunks_of_bytes, chunks_of_stream
from .votes import OUTSIDE_REASON, Collected, collect_votes, weigh_votes
from .weights import MAX_CONFIDENCE, MAX_EVIDENCE, MAX_FRAMES_SHOWN, MAX_HYPOTHESES, NOT_TEXT_FRACTION


def triage_log(source: str | Path | None = None, *, text: str | None = None, data: bytes | None = None,
               stream: IO[bytes] | None = None, cases: str | Path | None = None,
               similar: SimilarIndex | None = None) -> TriageResult:
    """Triage one log given as a path (``-`` = stdin), a string, bytes or a binary stream.

    ``cases`` is a cases file (``qnn-debug case-add``): past solved cases whose text occurs in the log are
    reported first and weigh on the answer. ``similar`` replaces the shipped index of labelled public logs (the
    accuracy script passes one without the log under test). Raises :class:`BadInputError` for a missing path, a
    directory, an empty log, or a cases file that cannot be read.
    """
    start = time.perf_counter()
    db = load_signatures()
    scan = Scan(db=db, similar=SimilarFeed(similar))
    if cases is not None:
        case_file = read_cases(cases)
        scan.cases = CaseMatcher(case_file.records)
        scan.case_warnings = case_file.warnings
    label = "<text>"
    if text is not None:
        label = "<text>"
        scan_chunks(scan, chunks_of_bytes(text.encode("utf-8", "replace")))
    elif data is not None:
        label = "<bytes>"
        scan_chunks(scan, chunks_of_bytes(data))
    elif stream is not None:
        label = "<stream>"
        scan_chunks(scan, chunks_of_stream(stream))
    elif source is None or str(source) == "-":
        label = "<stdin>"
        scan_chunks(scan, chunks_of_stream(sys.stdin.buffer))
    else:
        path = Path(source)
        label = path.name
        if not path.exists():
            raise BadInputError(f"log file {path} does not exist", hint="check the path, or pipe the log: ... 2>&1 | qnn-debug triage -")
        if path.is_dir():
            raise BadInputError(f"{path} is a directory", hint="pass one log file (stdout+stderr of the failing run)")
        try:
            with path.open("rb") as fh:
                scan_chunks(scan, chunks_of_stream(fh))
        except OSError as e:
            raise BadInputError(f"cannot read {path}: {e.strerror}", hint="check permissions") from None
    if not scan.tail and not scan.sig:  # nothing but whitespace
        raise BadInputError(f"the log {label} is empty", hint="capture the full stdout and stderr of the failing run (2>&1)")
    return _decide(scan, label, time.perf_counter() - start)


def _decide(scan: Scan, label: str, seconds: float) -> TriageResult:
    """Collect the votes, weigh them by the rule book, add what the log's shape says, rank, and build the result."""
    collected = collect_votes(scan)
    warnings = _warnings(scan)
    outside = weigh_votes(scan, collected.votes)
    tally = Tally()
    for v in collected.votes:
        tally.add(v.category, v.weight, v.line, v.reason, v.kind)
    number_only = add_structure_and_frames(scan, collected, tally)
    in_export = scan.export_marker or bool(scan.commands)
    stopped = add_export_readings(scan, collected.groups, tally, in_export, warnings)
    similar = add_similar(scan, tally, stopped)
    warnings.extend(_clue_warnings(scan))
    answer = rank(scan.db, tally, number_only, stopped)
    return _build_result(scan, label, seconds, collected, tally, answer, outside=outside, stopped=stopped,
                         in_export=in_export, similar=similar, warnings=warnings)


def _clue_warnings(scan: Scan) -> list[str]:
    out = list(scan.case_warnings)
    if "skip-check" in scan.clue_hits:
        out.append("ModuleBasic printed 'Skip check': nothing was compared for that output, so success means nothing.")
    return out


def _shown_evidence(scan: Scan, evidence: list[Evidence], category: str) -> list[Evidence]:
    """The chosen category's rows first, one row per log line, in the log's own words (or its error/tail lines)."""
    if not evidence:
        evidence = [Evidence(line=n, text=t, signature="generic-error-line", category="other") for n, t in scan.generic]
        evidence = evidence or [Evidence(line=n, text=t, signature="log-tail", category="other") for n, t in scan.tail]
    evidence.sort(key=lambda e: (e.category != category, e.line))
    evidence = first_per(evidence, lambda e: e.line)  # one row per log line
    for e in evidence:
        e.text = CALL_NOTE.sub("", e.text)  # the log's own words, without the call name triage added to read them
    return evidence


def _hypotheses(db: SignatureDB, tally: Tally, answer: Answer) -> list[Hypothesis]:
    hypotheses = [
        Hypothesis(category=c, title=db.categories[c].title, score=round(s, 2), why=tally.reasons.get(c, []),
                   playbook=db.categories[c].playbook)
        for c, s in answer.ranked[:MAX_HYPOTHESES]
    ]
    if answer.category == "other" and not any(h.category == "other" for h in hypotheses):
        hypotheses.append(Hypothesis(category="other", title=db.categories["other"].title, score=0.0,
                                     why=["no known QNN failure signature matched"], playbook=db.categories["other"].playbook))
    return hypotheses


def _build_result(scan: Scan, label: str, seconds: float, collected: Collected, tally: Tally, answer: Answer, *,
                  outside: bool, stopped: bool, in_export: bool, similar: SimilarOpinion,
                  warnings: list[str]) -> TriageResult:
    """The typed answer: category, title, evidence, hypotheses, facts decoded from the hits and runnable next steps."""
    db = scan.db
    category = answer.category
    low_reason = answer.low_reason
    evidence = _shown_evidence(scan, collected.evidence, category)
    hypotheses = _hypotheses(db, tally, answer)
    facts, op_steps = decode_facts(collected.groups, category)
    hits = collected.cases
    facts = [f"known case {k.date} ({k.category}): {k.cause} -> fix: {k.fix}" + (f" [{k.source}]" if k.source else "")
             for k in hits] + frame_facts(scan.frames) + command_facts(scan.commands) + facts
    facts += [db_clue.fact for db_clue in db.clues if db_clue.id in scan.clue_hits]
    facts += [site.fact() for site in scan.call_sites]
    spec = db.categories[category]
    title = spec.title + (" (the run reports success)" if category == "other" and "other" in tally.scores else "")
    if category == "other" and outside:
        title = spec.title + " (the failure is a script, configuration or app error outside QNN)"
        low_reason = OUTSIDE_REASON
    if category == "unsupported_op_not_registered" and "mnn-refused-conversion-failed" in scan.sig:
        title = "op refused by MNN's QNN backend: the conversion failed (even where the tool exited 0)"
    if stopped and category == "convert_segfault":
        title = "the export stopped without a crash line (re-run under stdbuf -o0 / gdb)"
    return TriageResult(
        source=label,
        category=category,
        title=title,
        confidence=round(min(answer.confidence, MAX_CONFIDENCE), 2),
        basis=answer.basis,
        low_confidence=low_reason is not None,
        low_confidence_reason=low_reason,
        playbook=spec.playbook,
        hypotheses=hypotheses,
        evidence=evidence[:MAX_EVIDENCE],
        next_steps=plan_next_steps(scan, collected.groups, category, op_steps, in_export),
        facts=facts,
        known_cases=hits,
        similar=similar.model_copy(update={"threads": shown(similar.threads)}),
        frames=scan.frames[:MAX_FRAMES_SHOWN],
        commands=scan.commands,
        noise=[NoiseHit(id=n.id, count=scan.noise_count[n.id], first_line=scan.noise_first.get(n.id, 0), why=n.why)
               for n in db.noise if n.id in scan.noise_count],
        warnings=warnings,
        stats=TriageStats(lines=scan.lines, bytes=scan.bytes, seconds=round(seconds, 3),
                          undecodable_fraction=round(scan.bad_bytes / max(scan.bytes, 1), 4)),
    )


def _warnings(scan: Scan) -> list[str]:
    out = []
    if scan.bytes and scan.bad_bytes / scan.bytes > NOT_TEXT_FRACTION:
        out.append(f"{100 * scan.bad_bytes / scan.bytes:.0f}% of the input is not text (NUL or invalid UTF-8): is this a log?")
    return out
