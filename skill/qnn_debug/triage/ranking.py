"""Ranking: tally the weighed votes, add what the log's shape says (past cases, an export that stops, similar
threads), and pick the category with a confidence capped by the kind of reading behind it (``basis``), saying in
``low_reason`` what would settle a weak answer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .cases import CASE_BOOST
from .commands import ended_cleanly
from .models import Basis, Evidence
from .scan import Scan
from .signatures import Signature, SignatureDB
from .similar import POLICY as SIMILAR_POLICY
from .similar import SimilarOpinion, lean_reason
from .structure import rules
from .votes import Collected, frame_category
from .weights import (
    CONFIDENCE_SCALE,
    EVIDENCE_TEXT_CHARS,
    LOW_CONFIDENCE,
    NOTHING_CONFIDENCE,
    RULE_BOOK,
    STOPPED_WEIGHT,
    SUCCESS_CONFIDENCE,
    WORDS_ONLY_CONFIDENCE,
)

# LinearAttention, RoPE, FusedLinear, GatedRMSNorm: OpTypes the LLM exporter's C4 fusion emits (schema at 4d40bdb).
LLM_C4_FUSED_OPTYPES = {"305", "306", "307", "308"}


@dataclass
class Tally:
    """Scores per category, with the first line, the reasons and the kinds of reading (the basis) behind each."""

    scores: dict[str, float] = field(default_factory=dict)
    first_line: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, set[str]] = field(default_factory=dict)

    def add(self, cat: str, weight: float, line: int, reason: str, kind: str) -> None:
        """``kind``: signature, words, hint, frame, structure, case or similar (what the basis is read from)."""
        self.scores[cat] = self.scores.get(cat, 0.0) + weight
        self.first_line[cat] = min(self.first_line.get(cat, line), line)
        self.reasons.setdefault(cat, []).append(reason)
        if weight > 0:
            self.kinds.setdefault(cat, set()).add(kind)


@dataclass
class Answer:
    """The chosen category, how sure, on what basis, and why it is only a lead (None when it is not)."""

    category: str
    confidence: float
    basis: Basis
    low_reason: str | None
    ranked: list[tuple[str, float]]


def add_structure_and_frames(scan: Scan, collected: Collected, tally: Tally) -> set[str]:
    """Evidence rows for the structure readings, known frames, the outside-QNN line and past cases (whose boost is
    scored here); returns the categories read only from a bare status number, not from any words."""
    evidence = collected.evidence
    if scan.outside.hit is not None:
        evidence.append(Evidence(line=scan.outside.hit[0], text=scan.outside.hit[1], signature="outside-qnn", category="other"))
    worded = {v.category for v in collected.votes if v.kind != "structure"}  # categories some signature, words, hint or frame speaks for
    number_only: set[str] = set()
    read_from_words: set[str] = set()
    for hit in collected.struct_hits:
        (number_only if hit.rule.startswith("code:") else read_from_words).add(hit.category)
        evidence.append(Evidence(line=hit.line, text=hit.text, signature=f"structure:{hit.rule}", category=hit.category))
    for frame in scan.frames:
        if frame.known:
            evidence.append(Evidence(line=frame.log_line, text=f"#{frame.number} {frame.function}"[:EVIDENCE_TEXT_CHARS],
                                     signature=f"frame:{frame.known}", category=frame_category(frame.known)))
    for case in collected.cases:
        tally.add(case.category, CASE_BOOST, case.line, f"past case {case.date}: {case.cause} (cases file)", "case")
        evidence.append(Evidence(line=case.line, text=f"matches past case: {case.match}"[:EVIDENCE_TEXT_CHARS],
                                 signature="cases-file", category=case.category))
    # On a tie, what failed in words ("graph finalize failed 1002": the finalize) outranks what the bare number
    # alone would name (1002 = MEM_ALLOC): the number says how it failed, the words say what failed.
    return number_only - (read_from_words | worded)


def add_export_readings(scan: Scan, groups: list[tuple[Signature, dict[str, str]]], tally: Tally, in_export: bool,
                         warnings: list[str]) -> bool:
    """What an export/convert log says by its shape: an LLM fused op without a QNN creator before a crash, and a log
    that stops without an end marker; returns True for the latter."""
    db = scan.db
    scores = tally.scores
    c4_fused = {g.get("optype") for sig, g in groups if sig.category == "unsupported_op_not_registered"} & LLM_C4_FUSED_OPTYPES
    if in_export and c4_fused and "convert_segfault" in scores and "unsupported_op_not_registered" in scores:
        # The llmexport Transformer-C4 fusions have no QNN creator; in convert mode they run on CPU with no copy
        # inserted and the next QNN op bakes their output as a constant: the "Not registered" lines are the
        # cause of the crash (fixed by re-exporting), not an op to implement.
        tally.add("convert_segfault", scores["unsupported_op_not_registered"], tally.first_line["unsupported_op_not_registered"],
                  "an op without a QNN creator inside a convert run falls back to CPU with no copy inserted and the next QNN "
                  "op bakes its output as a constant (source: alibaba/MNN@4d40bdb source/core/WrapExecution.cpp:22, "
                  "QNNBackend.cpp:1621-1627)", "signature")
    # A category the log's own lines name (the reporter's words alone do not make an export log end cleanly).
    failed = {c for c, sc in scores.items() if c != "other" and sc >= db.min_score and tally.kinds.get(c, set()) - {"words"}}
    tail_text = [line for _, line in scan.tail]
    stopped = in_export and not failed and not ended_cleanly(tail_text)
    if stopped:
        last = scan.tail[-1][0] if scan.tail else scan.lines
        tally.add("convert_segfault", STOPPED_WEIGHT, last,
                  "the export/convert log stops without an end marker or an error line: most likely a crash whose last lines "
                  "were lost in the pipe buffer, or a kill", "structure")
        warnings.append("The log stops without a crash line or an end marker: the last lines were probably lost in the "
                        "pipe buffer (or the process was killed). Re-run the failing command under `stdbuf -o0` (or "
                        "`gdb --args <command>`, then `bt`) and triage that log.")
    if in_export and c4_fused and not stopped and failed <= {"unsupported_op_not_registered"} and not ended_cleanly(tail_text):
        warnings.append("The export log stops right after an LLM fused op fell back to CPU, with no crash line and no "
                        "end marker: in convert mode that op's output is baked by the next QNN op, which usually "
                        "crashes. Re-run the failing command under `stdbuf -o0` (or `gdb --args <command>`, then `bt`) "
                        "and triage that log.")
    return stopped


def add_similar(scan: Scan, tally: Tally, stopped: bool) -> SimilarOpinion:
    """The similar-threads opinion; it gives the category only where no rule names a failure and none says success."""
    similar = scan.similar.opinion()
    named = any(s >= scan.db.min_score for c, s in tally.scores.items() if c != "other")
    if not stopped and not named and "other" not in tally.scores and scan.similar.leans():
        # No rule names a failure (neither the log's lines nor the reporter's words), none says the run succeeded, yet
        # the log says something failed: the closest labelled public logs lean clearly to one category.
        similar.decided = True
        tally.add(str(similar.category), scan.db.min_score, scan.lines, lean_reason(similar), "similar")
    return similar


def rank(db: SignatureDB, tally: Tally, number_only: set[str], stopped: bool) -> Answer:
    """The top failure at min_score or more (else ``other``), its confidence capped by the kind of reading behind it."""
    ranked = sorted(tally.scores.items(), key=lambda kv: (-kv[1], kv[0] in number_only, tally.first_line.get(kv[0], 0)))
    failures = [(c, s) for c, s in ranked if c != "other"]
    if failures and failures[0][1] >= db.min_score:
        category, top = failures[0]
        second = failures[1][1] if len(failures) > 1 else 0.0
        confidence = (1 - math.exp(-top / CONFIDENCE_SCALE)) * top / (top + second)
    else:
        category = "other"
        confidence = SUCCESS_CONFIDENCE if "other" in tally.scores else NOTHING_CONFIDENCE
    basis = _basis(tally.kinds.get(category, set()))
    if basis == "structure":  # said by low_confidence_reason (the typed field replaces the former free-text warning)
        confidence = min(confidence, rules().structure_only_confidence)
    elif basis == "words":
        confidence = min(confidence, WORDS_ONLY_CONFIDENCE)
    elif basis == "similar":
        confidence = min(confidence, SIMILAR_POLICY.confidence)
    low_reason = _low_confidence_reason(basis, confidence, stopped and category == "convert_segfault")
    return Answer(category, confidence, basis, low_reason, ranked)


def _basis(kinds: set[str]) -> Basis:
    """What decided the category: a known wording beats the reporter's words, which beat structure alone."""
    if kinds & {"signature", "frame", "case"}:
        return "signature"
    if "words" in kinds:
        return "words"
    if "structure" in kinds:
        return "structure"
    if "similar" in kinds:
        return "similar"
    return "none"


def _low_confidence_reason(basis: Basis, confidence: float, stopped: bool) -> str | None:
    """Why the answer is only a lead, and what would settle it (None when a known wording decided it clearly)."""
    if stopped:
        return ("the log stops without a crash line or an end marker: re-run the command under `stdbuf -o0` (or "
                "`gdb --args <command>`, then `bt`) and triage that log")
    if basis == "none":
        return ("nothing in the text names a failure: give the full stdout+stderr of the failing run (2>&1), or "
                "logcat on Android, and the command that was run; if the run stopped without a message, its last lines "
                "may be lost in the pipe buffer: re-run it under `stdbuf -o0` (or `gdb --args <command>`, then `bt`); if the "
                f"reporter's words say what failed, read them by the rule book ({RULE_BOOK})")
    if basis == "structure":
        return ("no known wording matched: the answer rests on the log's structure alone (a QNN status, the object "
                "that failed, a crash), so treat it as a lead, not a diagnosis; check it against the evidence lines and "
                f"the rule book ({RULE_BOOK})")
    if basis == "words":
        return ("the answer rests on the reporter's own words, not on a log line: ask for the failing run's full "
                f"output (stdout+stderr or logcat) to confirm it, and read the words by the rule book ({RULE_BOOK})")
    if basis == "similar":
        return ("no rule names the failure: the category is the one of labelled public threads this log resembles; "
                f"read them and check the log against them and the rule book ({RULE_BOOK})")
    if confidence < LOW_CONFIDENCE:
        return "a known wording matched, but other categories score close to it: read the other hypotheses too"
    return None
