"""Votes: one per piece of evidence for a category, collected from the scan and weighed by the labelling rule book.

What stops the run wins over a warning the run went on from (rule 2), a clear error keeps the label over the crash it
caused (rule 1), the reporter's words decide only where the log's lines do not, and an error outside QNN makes words
and structure weigh less (rule 4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .backtrace import Frame, known_frames
from .cases import KnownCase
from .models import Evidence
from .prose import reads_as_prose
from .scan import Scan
from .signatures import Signature
from .structure import StructHit, rules
from .weights import (
    CRASH_AFTER_ERROR_FACTOR,
    EXPORT_AFTER_FAILURE_FACTOR,
    EXPORT_LINE_FACTOR,
    EXPORT_TOOL_VOTE,
    OUTSIDE_FACTOR,
    OUTSIDE_VOTE,
    STRUCTURE_VOTE,
    SURVIVED_FACTOR,
    WORDS_AGAINST_LOG_FACTOR,
)

# Log levels as runtimes print them: [W]/[WARNING], <W> (QNN), W/tag and "date time pid tid W tag" (logcat),
# W1207 (glog), [W:onnxruntime (ORT), Python's WARNING:/UserWarning:; the error levels likewise.
# A bare level letter counts after a logcat date/time/pid prefix, or followed by two spaces ("I  vendor/..."): a prose
# line that starts with "I " is no info-level line.
_LEVEL_PREFIX = r"^\s*(?:(?:[\d:.\-/T]+\s+){2,4}|(?=[A-Z]\s\s))"
_SURVIVED_LEVEL = re.compile(r"(?i:\[(?:w|warn|warning|i|info|d|debug|v|verbose)\])|<[WIDV]>|(?<![\w/])[WIDV]/\w|\[[WIV]:"
                             r"|\bWARN(?:ING)?\b|[Ww]arning:|\bINFO\b|" + _LEVEL_PREFIX + r"[WIDV]\s|^\s*[WI]\d{4} ", re.MULTILINE)
_ERROR_LEVEL = re.compile(r"(?i:\[(?:e|err|error|f|fatal)\])|<[EF]>|(?<![\w/])[EF]/\w|\[[EF]:|\bERROR\b|\bFATAL\b"
                          r"|" + _LEVEL_PREFIX + r"[EF]\s|^\s*[EF]\d{4} ", re.MULTILINE)

# A line as a program prints it: a [tag], <level>, a timestamp or number, "name:" or "Tag/..." first.
_LOGGISH = re.compile(r"\s*(?:\[|<|\d|[\w.\-]+(?:\(\s*\d+\))?\s*:|[A-Z]/)")
# Words with which a line says the run goes on past it ("Can't Find type=5 backend, use 0 instead", "falling back").
_CARRIES_ON = re.compile(r"(?i)\b(?:use \w+ instead|instead\W*$|falling back|fall(?:s|ing)? ?back (?:to|on)|will (?:retry|try|use|fall)"
                         r"|retrying|continuing|skipping|ignored|ignoring it)\b")


@dataclass
class Vote:
    """One piece of evidence's weight for one category: where it is, what kind of reading it is, its log level."""

    category: str
    weight: float
    line: int
    last: int
    reason: str
    kind: str  # signature, words, hint, frame, structure
    survived: bool
    crash: bool = False
    text: str = ""
    rule: str = ""


@dataclass
class Collected:
    """The votes of one log before weighing, with the evidence rows and the named groups (op, code, node) of its hits."""

    votes: list[Vote]
    evidence: list[Evidence]
    groups: list[tuple[Signature, dict[str, str]]]
    struct_hits: list[StructHit]
    cases: list[KnownCase]  # past cases (cases file) the log matches, newest first


def collect_votes(scan: Scan) -> Collected:
    """One vote per matched signature, noise hint, known backtrace frame and structure reading, in log order."""
    db = scan.db
    by_id = {s.id: s for s in db.signatures}
    evidence: list[Evidence] = []
    groups: list[tuple[Signature, dict[str, str]]] = []
    votes: list[Vote] = []
    as_words: set[str] = set()  # signatures read as the reporter's words on this log
    for sid, state in scan.sig.items():
        sig = by_id[sid]
        if sig.requires_any and not (set(sig.requires_any) & scan.context_seen):
            continue
        lines = [e[0] for e in state.evidence]
        category = sig.category_for(state.evidence[0][2])
        if sig.basis == "words" or (sig.prose_is_words and all(reads_as_prose(text) for _n, text, _g in state.evidence)):
            as_words.add(sid)
        votes.append(Vote(category, sig.weight, min(lines), max(lines), f"{sig.why} ({state.count}x; source: {sig.source})",
                           "words" if sid in as_words else "signature",
                           all(survived(text) for _n, text, _g in state.evidence), crash=sig.crash))
        for line_no, line, g in state.evidence:
            evidence.append(Evidence(line=line_no, text=line, signature=sig.id, category=sig.category_for(g)))
            if g:
                groups.append((sig, g))
    for noise in db.noise:
        if noise.hint_category and noise.id in scan.noise_count:
            at = scan.noise_first[noise.id]
            votes.append(Vote(noise.hint_category, noise.hint_weight, at, at, f"weak hint: {noise.why} "
                               f"({scan.noise_count[noise.id]}x; source: {noise.source})", "hint", False))
    for cat, weight, at_line, reason in frame_scores(scan.frames):
        votes.append(Vote(cat, weight, at_line, at_line, reason, "frame", False))
    # The reporter's words do not stop structure from reading the same line (only a known wording does).
    # A crash term in the reporter's sentence (read as words above) is not read again as a crash line either.
    worded_lines = {e.line for e in evidence if by_id[e.signature].basis != "words"}
    struct_hits = [h for h in scan.structure.results() if h.line not in worded_lines]
    for h in struct_hits:
        votes.append(Vote(h.category, STRUCTURE_VOTE, h.line, h.line, f"log structure ({h.rule}): {h.why} (source: {h.source})",
                           "structure", survived(h.text), crash=h.rule == "crash", text=h.text, rule=h.rule))
    if scan.export_tool.hit is not None:
        at, said, tool = scan.export_tool.hit
        votes.append(Vote(EXPORT_CATEGORY, EXPORT_TOOL_VOTE, at, at,
                          f"a Python exception raised by MNN's {tool} script: the script refused its input (the export "
                          f"folder, its name, an argument or an installed package) before any QNN code ran",
                          "signature", False, text=said, rule="export-tool"))
        evidence.append(Evidence(line=at, text=said, signature="export-tool-error", category=EXPORT_CATEGORY))
    return Collected(votes, evidence, groups, struct_hits, scan.cases.hits())


def weigh_votes(scan: Scan, votes: list[Vote]) -> bool:
    """Apply the rule book to the votes in place; True when the failing lines are an error outside QNN (rule 4)."""
    db = scan.db
    _weigh_by_the_rule_book(votes)
    structure = rules()
    # Where a known wording already decides (a category at min_score), structure only reinforces; where none does,
    # structure decides. The reporter's words are not a known wording.
    known: dict[str, float] = {}
    for v in votes:
        if v.kind in ("signature", "hint", "frame"):
            known[v.category] = known.get(v.category, 0.0) + v.weight
    struct_weight = structure.weight_when_worded if any(w >= db.min_score for w in known.values()) else structure.weight
    for v in votes:
        if v.kind == "structure":
            v.weight *= struct_weight
    _weigh_export_tool(votes)
    _weigh_words(votes, db.min_score, db.words_outrank)
    # MNN's own script names MNN, so its error is not one outside QNN and MNN (rule 4 stands back)
    return _weigh_outside(votes, None if scan.export_tool.hit is not None else scan.outside.hit)


EXPORT_CATEGORY = "export_script_error"


def _weigh_export_tool(votes: list[Vote]) -> None:
    """Rule 1 for a script's Python exception: a crash or a QNN failure printed before it is its cause (a
    ``RuntimeError: compilefornpu failed`` after a segfault only reports the crash) and keeps the label; otherwise the
    exception is what stopped the run, and other readings of its own line (the wrapper's words) weigh little."""
    tool = next((v for v in votes if v.rule == "export-tool"), None)
    if tool is None:
        return
    before = [v for v in votes if v is not tool and v.kind not in ("words", "hint") and not v.survived
              and v.category not in (EXPORT_CATEGORY, "other") and v.line < tool.line
              and (v.crash or v.kind != "structure" or _ERROR_LEVEL.search(v.text) or _LOGGISH.match(v.text))]
    if before:
        tool.weight *= EXPORT_AFTER_FAILURE_FACTOR
        tool.reason += f" [a failure printed before it (line {before[0].line}, {before[0].category}) is its cause]"
        return
    for v in votes:
        if v is not tool and v.kind != "words" and v.category != EXPORT_CATEGORY and v.line == tool.line:
            v.weight *= EXPORT_LINE_FACTOR
            v.reason += " [the line is a Python exception of an MNN script, which names the failure]"


def _weigh_by_the_rule_book(votes: list[Vote]) -> None:
    """Rules 1 and 2 of the labelling rule book, on the log's own lines (structure weights are still factors here).

    Rule 2: a hit logged only at warning/info level (or saying the run carries on: "use 0 instead", "falling back")
    weighs little once a failure of another category follows it. Rule 1: a crash that follows a clear error of
    another category is what the error caused; the error keeps the label.
    """
    # What stops a run: a known wording or a crash, or a structure reading of a line that looks like a log line (a
    # reporter's closing sentence that happens to hold "error" and a noun stops nothing).
    log_votes = [v for v in votes if v.kind not in ("hint", "words")]
    stops = [(v.category, v.line) for v in log_votes if not v.survived
             and (v.kind != "structure" or v.crash or _ERROR_LEVEL.search(v.text) or _LOGGISH.match(v.text))]
    for v in votes:
        if v.kind == "words":
            continue
        if v.survived and any(c != v.category and at > v.last for c, at in stops):
            v.weight *= SURVIVED_FACTOR
            v.reason += " [a warning the run went on from: a later failure stopped it]"
        elif v.crash and any(c not in (v.category, "other") and at < v.line for c, at in stops):
            v.weight *= CRASH_AFTER_ERROR_FACTOR
            v.reason += " [the crash follows an earlier error, which keeps the label]"


OUTSIDE_REASON = ("the failing lines are a Python, configuration or app error that names nothing of QNN, HTP, the DSP or "
                   "MNN: fix the script or its configuration first, then re-run and triage the new log if QNN fails")


def _weigh_outside(votes: list[Vote], hit: tuple[int, str] | None) -> bool:
    """Rule 4 of the rule book: where the log's failing lines are a script, config or app-check error outside QNN, the
    reporter's words and structure readings (a thread title saying "crashes", "inference jobs" failed) weigh half;
    a known QNN wording keeps its weight. The error itself votes ``other``, so similar threads stand back too."""
    if hit is None:
        return False
    for v in votes:
        if v.kind in ("words", "structure") and v.category != "other":
            v.weight *= OUTSIDE_FACTOR
            v.reason += " [the log's failing lines are an error outside QNN]"
    line, text = hit
    votes.append(Vote("other", OUTSIDE_VOTE, line, line, f"a script, configuration or app-check error outside QNN: {text[:160]}",
                       "structure", False, text=text, rule="outside"))
    return True


def _weigh_words(votes: list[Vote], min_score: float, outrank: list[tuple[str, str, str]]) -> None:
    """The reporter's words are a hint: they decide only where the log's own lines do not.

    One statement said three ways is one piece of evidence (only the heaviest words vote per category); words that
    restate a category the log already shows add nothing; words against a failure the log itself shows weigh half,
    and so do words of a category that other words outrank (a library said missing before the crash it causes).
    """
    log: dict[str, float] = {}
    for v in votes:
        if v.kind not in ("words", "hint") and v.category != "other":
            log[v.category] = log.get(v.category, 0.0) + v.weight
    best: dict[str, Vote] = {}
    for v in votes:
        if v.kind == "words" and (v.category not in best or v.weight > best[v.category].weight):
            best[v.category] = v
    log_decides = any(w >= min_score for w in log.values())
    outranked = {weaker for stronger, weaker, _why in outrank if stronger in best and weaker in best}
    for v in votes:
        if v.kind != "words":
            continue
        if best[v.category] is not v or log.get(v.category, 0.0) > 0:
            v.weight = 0.0
        elif log_decides or v.category in outranked:
            v.weight *= WORDS_AGAINST_LOG_FACTOR


def survived(line: str) -> bool:
    """True when the line is logged at warning/info level (and at no error level), or says the run carries on."""
    if _CARRIES_ON.search(line):
        return True
    return _SURVIVED_LEVEL.search(line) is not None and _ERROR_LEVEL.search(line) is None


def frame_category(known_id: str) -> str:
    return next(k.category for k in known_frames().frames if k.id == known_id)


def frame_scores(frames: list[Frame]) -> list[tuple[str, float, int, str]]:
    """Each known function adds its weight once; a full matching backtrace of one category adds a bonus."""
    db = known_frames()
    by_id = {k.id: k for k in db.frames}
    seen: dict[str, tuple[float, int]] = {}
    per_cat: dict[str, int] = {}
    out: list[tuple[str, float, int, str]] = []
    for f in frames:
        if not f.known or f.known in seen:
            continue
        k = by_id[f.known]
        seen[f.known] = (k.weight, f.log_line)
        per_cat[k.category] = per_cat.get(k.category, 0) + 1
        out.append((k.category, k.weight, f.log_line, f"backtrace frame #{f.number} {f.function}: {k.why} (source: {k.source})"))
    for cat, n in per_cat.items():
        if n >= db.full_backtrace_frames:
            line = min(ln for c, _w, ln, _r in out if c == cat)
            out.append((cat, db.full_backtrace_bonus, line, f"full matching backtrace: {n} known MNN frames in one crash path"))
    return out
