"""Log triage: stream a log of any size, match data-file signatures, rank categories, return evidence.

Why streaming in 4 MiB chunks: a device log can be hundreds of MB; each chunk is searched only for
signatures whose literal anchors occur in it (``str in`` runs at memory speed), so memory stays bounded
and a 100 MB log takes seconds. Line numbers are kept exact: CRLF becomes LF, a lone CR (progress bars)
becomes a space, ANSI colours and NULs are removed, and noise lines are blanked but not deleted.
This module imports nothing heavy (``qnn-debug triage`` must start fast).

Deciding follows the labelling rule book: what stops the run wins over a warning the run went on from, a clear
error keeps the label over the crash it caused, and the reporter's own words decide only where the log's lines do
not. ``basis`` says which kind of reading decided (signature, words, structure, similar, none) and
``low_confidence_reason`` what would settle a weak answer.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, TypeVar

from ..errors import BadInputError
from .backtrace import Frame, known_frames, parse_frames
from .call_sites import CallSite, call_site
from .cases import CASE_BOOST, CaseMatcher, KnownCase, read_cases
from .commands import STEP_MARKERS, CommandLine, command_facts, ended_cleanly, find_commands
from .models import Basis, Evidence, Hypothesis, NextStep, NoiseHit, TriageResult, TriageStats
from .outside import OutsideScan
from .prose import reads_as_prose
from .signatures import Signature, SignatureDB, load_signatures
from .similar import POLICY as SIMILAR_POLICY
from .similar import SimilarFeed, SimilarIndex, SimilarOpinion, lean_reason, shown
from .structure import StructHit, StructureScan, rules

_T = TypeVar("_T")
CHUNK_BYTES = 4 << 20
MAX_LINE_BYTES = 1 << 20
MAX_EVIDENCE_PER_SIGNATURE = 3
MAX_EVIDENCE = 30
MAX_COUNTED_MATCHES = 10_000
EVIDENCE_TEXT_CHARS = 300

_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_GENERIC = re.compile(r"(?i)\b(?:error|fail(?:ed|ure)?|segmentation fault)\b")
_GENERIC_ANCHORS = (b"rror", b"RROR", b"ail", b"AIL", b"egmentation")
_FRAME_HINT = re.compile(rb"(?m)^\s*(?:\*\s*)?(?:frame\s+)?#\d|DEBUG\s*:\s+#\d")
_COMMAND_ANCHORS = (b"llmexport", b"generate_llm_qnn", b"compilefornpu", b"MNN2QNNModel", b"npu_convert", b"generateIO")
MAX_COMMANDS = 20
HEAD_CHARS = 256 * 1024  # head_only signatures (the reporter's prose, a pasted answer) read only this much of the log
STOPPED_WEIGHT = 3.0
SURVIVED_FACTOR = 0.3  # weight left to a warning-level hit once a later failure of another category stopped the run
CRASH_AFTER_ERROR_FACTOR = 0.5  # weight left to a crash that follows a clear error of another category
WORDS_AGAINST_LOG_FACTOR = 0.5  # weight left to the reporter's words when the log's own lines already name a failure
LOW_CONFIDENCE = 0.45
WORDS_ONLY_CONFIDENCE = 0.6
# The rule book triage is measured against, where an unsure answer sends the reader (a playbook, served as
# playbook://triage-labels).
RULE_BOOK = "playbooks/triage-labels.md"
OUTSIDE_FACTOR = 0.5  # weight left to words and structure once the log's failing lines are a script error outside QNN
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
class _Vote:
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
class _SigState:
    count: int = 0
    evidence: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)


@dataclass
class _Scan:
    """Everything the scan keeps: bounded evidence per signature, counters, context literals seen."""

    db: SignatureDB
    lines: int = 0
    bytes: int = 0
    bad_bytes: int = 0
    sig: dict[str, _SigState] = field(default_factory=dict)
    noise_count: dict[str, int] = field(default_factory=dict)
    noise_first: dict[str, int] = field(default_factory=dict)
    context_seen: set[str] = field(default_factory=set)
    generic: list[tuple[int, str]] = field(default_factory=list)
    tail: list[tuple[int, str]] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    commands: list[CommandLine] = field(default_factory=list)
    clue_hits: dict[str, tuple[int, str]] = field(default_factory=dict)
    export_marker: bool = False
    cases: CaseMatcher = field(default_factory=lambda: CaseMatcher([]))
    case_warnings: list[str] = field(default_factory=list)
    structure: StructureScan = field(default_factory=StructureScan)
    call_sites: list[CallSite] = field(default_factory=list)
    similar: SimilarFeed = field(default_factory=SimilarFeed)
    outside: OutsideScan = field(default_factory=OutsideScan)


# LinearAttention, RoPE, FusedLinear, GatedRMSNorm: OpTypes the LLM exporter's C4 fusion emits (schema at 4d40bdb).
LLM_C4_FUSED_OPTYPES = {"305", "306", "307", "308"}


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
    scan = _Scan(db=db, similar=SimilarFeed(similar))
    if cases is not None:
        case_file = read_cases(cases)
        scan.cases = CaseMatcher(case_file.records)
        scan.case_warnings = case_file.warnings
    label = "<text>"
    if text is not None:
        label = "<text>"
        _scan_chunks(scan, _chunks_of_bytes(text.encode("utf-8", "replace")))
    elif data is not None:
        label = "<bytes>"
        _scan_chunks(scan, _chunks_of_bytes(data))
    elif stream is not None:
        label = "<stream>"
        _scan_chunks(scan, _chunks_of_stream(stream))
    elif source is None or str(source) == "-":
        label = "<stdin>"
        _scan_chunks(scan, _chunks_of_stream(sys.stdin.buffer))
    else:
        path = Path(source)
        label = path.name
        if not path.exists():
            raise BadInputError(f"log file {path} does not exist", hint="check the path, or pipe the log: ... 2>&1 | qnn-debug triage -")
        if path.is_dir():
            raise BadInputError(f"{path} is a directory", hint="pass one log file (stdout+stderr of the failing run)")
        try:
            with path.open("rb") as fh:
                _scan_chunks(scan, _chunks_of_stream(fh))
        except OSError as e:
            raise BadInputError(f"cannot read {path}: {e.strerror}", hint="check permissions") from None
    if not scan.tail and not scan.sig:  # nothing but whitespace
        raise BadInputError(f"the log {label} is empty", hint="capture the full stdout and stderr of the failing run (2>&1)")
    return _decide(scan, label, time.perf_counter() - start)


# --------------------------------------------------------------------------- reading


def _chunks_of_bytes(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), CHUNK_BYTES):
        yield data[i : i + CHUNK_BYTES]


def _chunks_of_stream(fh: IO[bytes]) -> Iterator[bytes]:
    while True:
        block = fh.read(CHUNK_BYTES)
        if not block:
            return
        yield block


def _lines_aligned(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Re-cut raw chunks at newlines so no line (nor a UTF-8 sequence) is split, except absurdly long lines."""
    carry = b""
    for block in chunks:
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) < MAX_LINE_BYTES:
                carry = data
                continue
            cut = len(data) - 1
        carry = data[cut + 1 :]
        yield data[: cut + 1]
    if carry:
        yield carry


def _clean(raw: bytes) -> tuple[str, int]:
    """Normalise one aligned chunk (bytes first: much faster than on a wide str) and decode it.

    Returns the text and the count of NUL/undecodable bytes.
    """
    nul = raw.count(b"\x00")
    if nul:
        raw = raw.replace(b"\x00", b"")
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b" ")
    text = raw.decode("utf-8", "replace")
    return text, nul + (text.count("\ufffd") if "\ufffd" in text else 0)


# --------------------------------------------------------------------------- scanning


def _scan_chunks(scan: _Scan, chunks: Iterator[bytes]) -> None:
    sigs = scan.db.signatures
    context_literals = {lit for s in sigs for lit in s.requires_any}
    anchors = {a: a.encode("utf-8") for s in sigs if not s.head_only for a in s.anchors}
    anchors.update({a: a.encode("utf-8") for n in scan.db.noise for a in n.anchors})
    # Each absent anchor costs a full scan of the chunk, so anchors that are not ASCII (Chinese words) are only
    # looked for in chunks that are not pure ASCII: they cannot occur in one.
    narrow = {a: b for a, b in anchors.items() if b.isascii()}
    wide = {a: b for a, b in anchors.items() if not b.isascii()}
    for raw in _lines_aligned(chunks):
        scan.bytes += len(raw)
        if b"Error in file" in raw:
            raw = _read_call_sites(scan, raw)
        ascii_only = raw.isascii()
        # Anchor presence is tested once per chunk on the raw bytes (memchr speed), shared by all signatures.
        present = {a for a, b in narrow.items() if b in raw}
        if not ascii_only:
            present.update(a for a, b in wide.items() if b in raw)
        text, bad = _clean(raw)
        scan.bad_bytes += bad
        base = scan.lines
        _remember_tail(scan, text, base)
        text = _blank_noise(scan, text, base, present)
        scan.similar.feed(text)
        scan.outside.feed(text, base)
        scan.structure.feed(text, base)
        for lit in context_literals - scan.context_seen:
            if (ascii_only and not lit.isascii()) or lit.encode("utf-8") not in raw:
                continue
            scan.context_seen.add(lit)
        head: str | None = None
        for sig in sigs:
            if sig.head_only:
                if base != 0 or (sig.needs_non_ascii and ascii_only):
                    continue
                if head is None:
                    cut = text.find("\n", HEAD_CHARS)
                    head = text if cut < 0 else text[: cut + 1]
                _match(scan, sig, head, base)
                continue
            if sig.needs_non_ascii:
                if ascii_only or (sig.prefilter and not sig.prefilter_regex.search(text)):
                    continue
            elif not present.intersection(sig.anchors):
                continue
            _match(scan, sig, text, base)
        _scan_structure(scan, raw, text, base)
        if len(scan.generic) < 5 and any(a in raw for a in _GENERIC_ANCHORS):
            for m in islice(_GENERIC.finditer(text), 5 - len(scan.generic)):
                scan.generic.append(_line_at(text, m.start(), base))
        scan.lines += text.count("\n")
    if scan.bytes and not scan.lines:
        scan.lines = 1


_CALL_NOTE = re.compile(r" \[MNN \w+ line table: [^\]]*\]")  # what _read_call_sites adds; evidence stays verbatim


def _read_call_sites(scan: _Scan, raw: bytes) -> bytes:
    """Name the QNN call behind each MNN ``Error in file ..., line N: error code C`` line (same line, so line
    numbers stay exact), so that the signatures read ``contextCreateFromBinary failed ...`` and not a bare code."""
    out = []
    for line in raw.split(b"\n"):
        site = call_site(line.decode("utf-8", "replace")) if b"Error in file" in line else None
        if site is not None:
            if len(scan.call_sites) < 8 and site not in scan.call_sites:
                scan.call_sites.append(site)
            note = f" [MNN {site.commit} line table: {site.reading()}]".encode()
            line = line[:-1] + note + b"\r" if line.endswith(b"\r") else line + note
        out.append(line)
    return b"\n".join(out)


def _scan_structure(scan: _Scan, raw: bytes, text: str, base: int) -> None:
    """Backtrace frames, export command lines and markers, clues and past cases of one chunk."""
    if len(scan.frames) < 64 and _FRAME_HINT.search(raw):
        scan.frames.extend(parse_frames(text, base, limit=64 - len(scan.frames)))
    if len(scan.commands) < MAX_COMMANDS and any(a in raw for a in _COMMAND_ANCHORS):
        scan.commands.extend(find_commands(text, base)[: MAX_COMMANDS - len(scan.commands)])
    if not scan.export_marker and any(m.encode("utf-8") in raw for m in STEP_MARKERS):
        scan.export_marker = True
    for clue in scan.db.clues:
        if clue.id in scan.clue_hits or not any(a.encode("utf-8") in raw for a in clue.anchors):
            continue
        m = clue.regex.search(text)
        if m:
            scan.clue_hits[clue.id] = _line_at(text, m.start(), base)
    scan.cases.feed(text, base)


def _blank_noise(scan: _Scan, text: str, base: int, present: set[str]) -> str:
    """Replace every noise match by as many newlines as it spanned (line numbers stay exact)."""
    for noise in scan.db.noise:
        if not present.intersection(noise.anchors):
            continue
        first = noise.regex.search(text)
        if first is None:
            continue
        if noise.id not in scan.noise_first:
            scan.noise_first[noise.id] = base + text.count("\n", 0, first.start()) + 1
        text, n = noise.regex.subn(lambda m: "\n" * m.group(0).count("\n"), text)
        scan.noise_count[noise.id] = scan.noise_count.get(noise.id, 0) + n
    return text


def _match(scan: _Scan, sig: Signature, text: str, base: int) -> None:
    state = scan.sig.setdefault(sig.id, _SigState())
    for m in islice(sig.regex.finditer(text), MAX_COUNTED_MATCHES):
        if not _value_ok(sig, m) or not sig.context_ok(text, m.start()):
            continue
        state.count += 1
        if len(state.evidence) < MAX_EVIDENCE_PER_SIGNATURE:
            line_no, line = _line_at(text, m.start(), base)
            if state.evidence and state.evidence[-1][0] == line_no:
                continue  # two alternatives of one pattern on the same line are one piece of evidence
            groups = {k: v for k, v in m.groupdict().items() if v}
            state.evidence.append((line_no, line, groups))
    if state.count == 0:
        del scan.sig[sig.id]


def _value_ok(sig: Signature, m: re.Match[str]) -> bool:
    if sig.min_value is None and sig.max_value is None:
        return True
    try:
        value = float(m.group("value"))
    except (IndexError, TypeError, ValueError):
        return False
    if sig.min_value is not None and not value > sig.min_value:
        return False
    return not (sig.max_value is not None and value > sig.max_value)


def _line_at(text: str, pos: int, base: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start : end if end >= 0 else len(text)].strip()
    return base + text.count("\n", 0, start) + 1, line[:EVIDENCE_TEXT_CHARS]


def _remember_tail(scan: _Scan, text: str, base: int) -> None:
    lines = text.rstrip("\n").split("\n")[-5:] if len(text) < 65536 else text[-65536:].rstrip("\n").split("\n")[-5:]
    total = text.count("\n")
    first_no = base + total - len(lines) + (0 if text.endswith("\n") else 1) + 1
    for i, line in enumerate(lines):
        if line.strip():
            scan.tail.append((first_no + i, line.strip()[:EVIDENCE_TEXT_CHARS]))
    scan.tail = scan.tail[-5:]


# --------------------------------------------------------------------------- deciding


@dataclass
class _Tally:
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
class _Collected:
    """The votes of one log before weighing, with the evidence rows and the named groups (op, code, node) of its hits."""

    votes: list[_Vote]
    evidence: list[Evidence]
    groups: list[tuple[Signature, dict[str, str]]]
    struct_hits: list[StructHit]
    cases: list[KnownCase]  # past cases (cases file) the log matches, newest first


@dataclass
class _Answer:
    """The chosen category, how sure, on what basis, and why it is only a lead (None when it is not)."""

    category: str
    confidence: float
    basis: Basis
    low_reason: str | None
    ranked: list[tuple[str, float]]


def _decide(scan: _Scan, label: str, seconds: float) -> TriageResult:
    """Collect the votes, weigh them by the rule book, add what the log's shape says, rank, and build the result."""
    collected = _collect_votes(scan)
    warnings = _warnings(scan)
    outside = _weigh_votes(scan, collected.votes)
    tally = _Tally()
    for v in collected.votes:
        tally.add(v.category, v.weight, v.line, v.reason, v.kind)
    number_only = _add_structure_and_frames(scan, collected, tally)
    in_export = scan.export_marker or bool(scan.commands)
    stopped = _add_export_readings(scan, collected.groups, tally, in_export, warnings)
    similar = _add_similar(scan, tally, stopped)
    warnings.extend(_clue_warnings(scan))
    answer = _rank(scan.db, tally, number_only, stopped)
    return _build_result(scan, label, seconds, collected, tally, answer, outside=outside, stopped=stopped,
                         in_export=in_export, similar=similar, warnings=warnings)


def _collect_votes(scan: _Scan) -> _Collected:
    """One vote per matched signature, noise hint, known backtrace frame and structure reading, in log order."""
    db = scan.db
    by_id = {s.id: s for s in db.signatures}
    evidence: list[Evidence] = []
    groups: list[tuple[Signature, dict[str, str]]] = []
    votes: list[_Vote] = []
    as_words: set[str] = set()  # signatures read as the reporter's words on this log
    for sid, state in scan.sig.items():
        sig = by_id[sid]
        if sig.requires_any and not (set(sig.requires_any) & scan.context_seen):
            continue
        lines = [e[0] for e in state.evidence]
        category = sig.category_for(state.evidence[0][2])
        if sig.basis == "words" or (sig.prose_is_words and all(reads_as_prose(text) for _n, text, _g in state.evidence)):
            as_words.add(sid)
        votes.append(_Vote(category, sig.weight, min(lines), max(lines), f"{sig.why} ({state.count}x; source: {sig.source})",
                           "words" if sid in as_words else "signature",
                           all(_survived(text) for _n, text, _g in state.evidence), crash=sig.crash))
        for line_no, line, g in state.evidence:
            evidence.append(Evidence(line=line_no, text=line, signature=sig.id, category=sig.category_for(g)))
            if g:
                groups.append((sig, g))
    for noise in db.noise:
        if noise.hint_category and noise.id in scan.noise_count:
            at = scan.noise_first[noise.id]
            votes.append(_Vote(noise.hint_category, noise.hint_weight, at, at, f"weak hint: {noise.why} "
                               f"({scan.noise_count[noise.id]}x; source: {noise.source})", "hint", False))
    for cat, weight, at_line, reason in _frame_scores(scan.frames):
        votes.append(_Vote(cat, weight, at_line, at_line, reason, "frame", False))
    # The reporter's words do not stop structure from reading the same line (only a known wording does).
    # A crash term in the reporter's sentence (read as words above) is not read again as a crash line either.
    worded_lines = {e.line for e in evidence if by_id[e.signature].basis != "words"}
    struct_hits = [h for h in scan.structure.results() if h.line not in worded_lines]
    for h in struct_hits:
        votes.append(_Vote(h.category, 1.0, h.line, h.line, f"log structure ({h.rule}): {h.why} (source: {h.source})",
                           "structure", _survived(h.text), crash=h.rule == "crash", text=h.text, rule=h.rule))
    return _Collected(votes, evidence, groups, struct_hits, scan.cases.hits())


def _weigh_votes(scan: _Scan, votes: list[_Vote]) -> bool:
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
    _weigh_words(votes, db.min_score, db.words_outrank)
    return _weigh_outside(votes, scan.outside.hit)


def _add_structure_and_frames(scan: _Scan, collected: _Collected, tally: _Tally) -> set[str]:
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
                                     signature=f"frame:{frame.known}", category=_frame_category(frame.known)))
    for case in collected.cases:
        tally.add(case.category, CASE_BOOST, case.line, f"past case {case.date}: {case.cause} (cases file)", "case")
        evidence.append(Evidence(line=case.line, text=f"matches past case: {case.match}"[:EVIDENCE_TEXT_CHARS],
                                 signature="cases-file", category=case.category))
    # On a tie, what failed in words ("graph finalize failed 1002": the finalize) outranks what the bare number
    # alone would name (1002 = MEM_ALLOC): the number says how it failed, the words say what failed.
    return number_only - (read_from_words | worded)


def _add_export_readings(scan: _Scan, groups: list[tuple[Signature, dict[str, str]]], tally: _Tally, in_export: bool,
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


def _add_similar(scan: _Scan, tally: _Tally, stopped: bool) -> SimilarOpinion:
    """The similar-threads opinion; it gives the category only where no rule names a failure and none says success."""
    similar = scan.similar.opinion()
    named = any(s >= scan.db.min_score for c, s in tally.scores.items() if c != "other")
    if not stopped and not named and "other" not in tally.scores and scan.similar.leans():
        # No rule names a failure (neither the log's lines nor the reporter's words), none says the run succeeded, yet
        # the log says something failed: the closest labelled public logs lean clearly to one category.
        similar.decided = True
        tally.add(str(similar.category), scan.db.min_score, scan.lines, lean_reason(similar), "similar")
    return similar


def _clue_warnings(scan: _Scan) -> list[str]:
    out = list(scan.case_warnings)
    if "skip-check" in scan.clue_hits:
        out.append("ModuleBasic printed 'Skip check': nothing was compared for that output, so success means nothing.")
    return out


def _rank(db: SignatureDB, tally: _Tally, number_only: set[str], stopped: bool) -> _Answer:
    """The top failure at min_score or more (else ``other``), its confidence capped by the kind of reading behind it."""
    ranked = sorted(tally.scores.items(), key=lambda kv: (-kv[1], kv[0] in number_only, tally.first_line.get(kv[0], 0)))
    failures = [(c, s) for c, s in ranked if c != "other"]
    if failures and failures[0][1] >= db.min_score:
        category, top = failures[0]
        second = failures[1][1] if len(failures) > 1 else 0.0
        confidence = (1 - math.exp(-top / 6)) * top / (top + second)
    else:
        category = "other"
        confidence = 0.5 if "other" in tally.scores else 0.2
    basis = _basis(tally.kinds.get(category, set()))
    if basis == "structure":  # said by low_confidence_reason (the typed field replaces the former free-text warning)
        confidence = min(confidence, rules().structure_only_confidence)
    elif basis == "words":
        confidence = min(confidence, WORDS_ONLY_CONFIDENCE)
    elif basis == "similar":
        confidence = min(confidence, SIMILAR_POLICY.confidence)
    low_reason = _low_confidence_reason(basis, confidence, stopped and category == "convert_segfault")
    return _Answer(category, confidence, basis, low_reason, ranked)


def _shown_evidence(scan: _Scan, evidence: list[Evidence], category: str) -> list[Evidence]:
    """The chosen category's rows first, one row per log line, in the log's own words (or its error/tail lines)."""
    if not evidence:
        evidence = [Evidence(line=n, text=t, signature="generic-error-line", category="other") for n, t in scan.generic]
        evidence = evidence or [Evidence(line=n, text=t, signature="log-tail", category="other") for n, t in scan.tail]
    evidence.sort(key=lambda e: (e.category != category, e.line))
    evidence = _first_per(evidence, lambda e: e.line)  # one row per log line
    for e in evidence:
        e.text = _CALL_NOTE.sub("", e.text)  # the log's own words, without the call name triage added to read them
    return evidence


def _hypotheses(db: SignatureDB, tally: _Tally, answer: _Answer) -> list[Hypothesis]:
    hypotheses = [
        Hypothesis(category=c, title=db.categories[c].title, score=round(s, 2), why=tally.reasons.get(c, []),
                   playbook=db.categories[c].playbook)
        for c, s in answer.ranked[:5]
    ]
    if answer.category == "other" and not any(h.category == "other" for h in hypotheses):
        hypotheses.append(Hypothesis(category="other", title=db.categories["other"].title, score=0.0,
                                     why=["no known QNN failure signature matched"], playbook=db.categories["other"].playbook))
    return hypotheses


def _next_steps(scan: _Scan, groups: list[tuple[Signature, dict[str, str]]], category: str, op_steps: list[NextStep],
                in_export: bool) -> list[NextStep]:
    """Concrete `qnn-debug op` steps for the ops named, then the category's own steps (never one asking for what the
    log already gives), one step per command."""
    db = scan.db
    spec = db.categories[category]
    # Under getTensorIdx (the #4716 map miss) the op in the frames only read a tensor an earlier CPU-fallback op
    # left unmapped: its constraints are not the question, so it gets no `qnn-debug op` step.
    frame_ops = [] if any(f.known == "get-tensor-idx" for f in scan.frames) else _ops_in_frames(scan.frames)
    steps = _op_steps(frame_ops) + op_steps
    steps = list({s.cli: s for s in steps}.values())[:3]
    has_op_steps = bool(steps)
    for s in spec.next_steps:
        if scan.frames and "backtrace" in s.why:
            continue  # never ask for a backtrace the user already gave
        if has_op_steps and s.tool == "lookup_op_constraints" and s.cli is None:
            continue  # the concrete `qnn-debug op <name>` steps above replace the generic one
        steps.append(_tool_step(db, s.tool, s.cli or db.tools[s.tool], s.why))
    if category == "op_validation_failed_3110_0xc26" and _llm_index_node(groups, in_export):
        steps.insert(0, _tool_step(db, "check_llm_export", db.tools["check_llm_export"],
                                   "a Gather/rotary node of an LLM export fails validation: the usual cause is an "
                                   "index tensor quantized by smooth/omni activation quant; llm-check finds it"))
    return _first_per(steps, lambda s: s.cli)  # one step per command


def _build_result(scan: _Scan, label: str, seconds: float, collected: _Collected, tally: _Tally, answer: _Answer, *,
                  outside: bool, stopped: bool, in_export: bool, similar: SimilarOpinion,
                  warnings: list[str]) -> TriageResult:
    """The typed answer: category, title, evidence, hypotheses, facts decoded from the hits and runnable next steps."""
    db = scan.db
    category = answer.category
    low_reason = answer.low_reason
    evidence = _shown_evidence(scan, collected.evidence, category)
    hypotheses = _hypotheses(db, tally, answer)
    facts, op_steps = _facts(collected.groups, category)
    hits = collected.cases
    facts = [f"known case {k.date} ({k.category}): {k.cause} -> fix: {k.fix}" + (f" [{k.source}]" if k.source else "")
             for k in hits] + _frame_facts(scan.frames) + command_facts(scan.commands) + facts
    facts += [db_clue.fact for db_clue in db.clues if db_clue.id in scan.clue_hits]
    facts += [site.fact() for site in scan.call_sites]
    spec = db.categories[category]
    title = spec.title + (" (the run reports success)" if category == "other" and "other" in tally.scores else "")
    if category == "other" and outside:
        title = spec.title + " (the failure is a script, configuration or app error outside QNN)"
        low_reason = _OUTSIDE_REASON
    if category == "unsupported_op_not_registered" and "mnn-refused-conversion-failed" in scan.sig:
        title = "op refused by MNN's QNN backend: the conversion failed (even where the tool exited 0)"
    if stopped and category == "convert_segfault":
        title = "the export stopped without a crash line (re-run under stdbuf -o0 / gdb)"
    return TriageResult(
        source=label,
        category=category,
        title=title,
        confidence=round(min(answer.confidence, 0.99), 2),
        basis=answer.basis,
        low_confidence=low_reason is not None,
        low_confidence_reason=low_reason,
        playbook=spec.playbook,
        hypotheses=hypotheses,
        evidence=evidence[:MAX_EVIDENCE],
        next_steps=_next_steps(scan, collected.groups, category, op_steps, in_export),
        facts=facts,
        known_cases=hits,
        similar=similar.model_copy(update={"threads": shown(similar.threads)}),
        frames=scan.frames[:32],
        commands=scan.commands,
        noise=[NoiseHit(id=n.id, count=scan.noise_count[n.id], first_line=scan.noise_first.get(n.id, 0), why=n.why)
               for n in db.noise if n.id in scan.noise_count],
        warnings=warnings,
        stats=TriageStats(lines=scan.lines, bytes=scan.bytes, seconds=round(seconds, 3),
                          undecodable_fraction=round(scan.bad_bytes / max(scan.bytes, 1), 4)),
    )


def _weigh_by_the_rule_book(votes: list[_Vote]) -> None:
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


_OUTSIDE_REASON = ("the failing lines are a Python, configuration or app error that names nothing of QNN, HTP, the DSP or "
                   "MNN: fix the script or its configuration first, then re-run and triage the new log if QNN fails")


def _weigh_outside(votes: list[_Vote], hit: tuple[int, str] | None) -> bool:
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
    votes.append(_Vote("other", 1.0, line, line, f"a script, configuration or app-check error outside QNN: {text[:160]}",
                       "structure", False, text=text, rule="outside"))
    return True


def _weigh_words(votes: list[_Vote], min_score: float, outrank: list[tuple[str, str, str]]) -> None:
    """The reporter's words are a hint: they decide only where the log's own lines do not.

    One statement said three ways is one piece of evidence (only the heaviest words vote per category); words that
    restate a category the log already shows add nothing; words against a failure the log itself shows weigh half,
    and so do words of a category that other words outrank (a library said missing before the crash it causes).
    """
    log: dict[str, float] = {}
    for v in votes:
        if v.kind not in ("words", "hint") and v.category != "other":
            log[v.category] = log.get(v.category, 0.0) + v.weight
    best: dict[str, _Vote] = {}
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


def _survived(line: str) -> bool:
    """True when the line is logged at warning/info level (and at no error level), or says the run carries on."""
    if _CARRIES_ON.search(line):
        return True
    return _SURVIVED_LEVEL.search(line) is not None and _ERROR_LEVEL.search(line) is None


def _warnings(scan: _Scan) -> list[str]:
    out = []
    if scan.bytes and scan.bad_bytes / scan.bytes > 0.05:
        out.append(f"{100 * scan.bad_bytes / scan.bytes:.0f}% of the input is not text (NUL or invalid UTF-8): is this a log?")
    return out


def _facts(groups: list[tuple[Signature, dict[str, str]]], category: str) -> tuple[list[str], list[NextStep]]:
    """Decode what the matched lines name: OpType numbers, QNN error codes, rejected QNN/ONNX ops."""
    from ..mnn.optypes import optype_name, qnn_mapping, source
    from ..mnn.refusals import CONDITIONS
    from .codes import code_name

    facts: list[str] = []
    ops: list[str] = []
    seen: set[str] = set()

    def add(fact: str) -> None:
        if fact not in seen:
            seen.add(fact)
            facts.append(fact)

    commit = source()["commit"][:7]
    declined: set[int] = set()  # OpTypes whose creator declined: the "registers it" reading would mislead
    order = ("mnn-refused-conversion-failed", "mnn-dont-support-type")
    for sig, g in sorted(groups, key=lambda sg: (sg[0].category != category, sg[0].id not in order)):
        if "optype" in g:
            n = int(g["optype"])
            try:
                name = optype_name(n)
            except BadInputError:
                add(f"OpType {n} is not in MNN's OpType enum at {commit} (newer/older MNN?)")
                continue
            m = qnn_mapping(n)
            if m is None:
                add(f"OpType {n} = {name}: MNN's QNN backend has no implementation at {commit}; it cannot run on the NPU")
            elif sig.id.startswith("mnn-dont-support") or sig.id == "mnn-refused-conversion-failed":
                declined.add(n)
                add(f"OpType {n} = {name}: MNN at {commit} registers {m.creator}, and that creator declined this op's form "
                    "('Don't support type')" + (f": {CONDITIONS[n]}" if n in CONDITIONS else ""))
            elif n not in declined:
                add(f"OpType {n} = {name}: MNN at {commit} registers {m.creator} (emits {', '.join(m.qnn_ops[:4])}); "
                    "if your build says 'Not registered', it predates that support or was built without it")
            ops.append(name)
        for key in ("code", "hex", "handle"):
            if key in g:
                value = int(g[key], 16) if key == "hex" else int(g[key])
                add(f"QNN error {value & 0xFFFF}" + (f" (0x{value:x})" if key == "hex" else "") + f" = {code_name(value & 0xFFFF)}")
        for key in ("op", "onnx_op", "onnx_op2", "opname"):
            if key in g:
                ops.append(g[key])
        if "node" in g and category in ("op_validation_failed_3110_0xc26", "finalize_failed_1002", "unsupported_op_not_registered"):
            add(f"node named by the log: {g['node']}")
            if sig.category_for(g) == category and (op := _op_of_node(g["node"])):
                ops.append(op)  # _op_steps drops a name the lookup does not know
    return facts, _op_steps(ops)


_NODE_PARTS = re.compile(r"[_/.:]+")


def _op_of_node(node: str) -> str | None:
    """The op type a QNN node name ends in, if any (MNN and the QNN converters name nodes ``<path>_<OpType>``, e.g.
    ``_layers_23_self_attn_o_proj_Linear_MatMul``); whether the lookup knows it is :func:`_op_steps`' question."""
    parts = [p for p in _NODE_PARTS.split(node) if p and not p.isdigit()]
    return parts[-1] if parts else None


_INDEX_NODE = re.compile(r"(?i)rotary|rope|gather|position|cos|sin")


def _llm_index_node(groups: list[tuple[Signature, dict[str, str]]], in_export: bool) -> bool:
    """A rejected node that reads positions or gathers, in an LLM export (export log, or decoder-layer names)."""
    for _sig, g in groups:
        node = g.get("node", "")
        if node and _INDEX_NODE.search(node) and (in_export or re.search(r"layers?[._]\d", node)
                                                  or "rotary" in node.lower()):
            return True
    return False


def _first_per(items: list[_T], key: Callable[[_T], object]) -> list[_T]:
    """``items`` in order, keeping only the first of those that share a key."""
    seen: set[object] = set()
    kept = []
    for x in items:
        k = key(x)
        if k not in seen:
            seen.add(k)
            kept.append(x)
    return kept


def _op_steps(ops: list[str]) -> list[NextStep]:
    """`qnn-debug op` for each op the log names, with --probe only when that op can be probed (runs as printed)."""
    from ..ops.lookup import op_next_step

    steps: list[NextStep] = []
    for op in dict.fromkeys(ops):
        if len(steps) >= 3:
            break
        step = op_next_step(op)
        if step is not None:
            steps.append(NextStep(tool="lookup_op_constraints", cli=step[0],
                                  why=f"the log names {op}: {step[1]}"))
    return steps


_OP_IN_FRAME = re.compile(r"\bQNN(?!Backend|CommonExecution|TensorWrapper|TensorDumper|Convertor)(?P<op>[A-Z]\w*)::on(?:Encode|Resize)")


def _ops_in_frames(frames: list[Frame]) -> list[str]:
    return [m.group("op") for f in frames if (m := _OP_IN_FRAME.search(f.function))]


def _frame_category(known_id: str) -> str:
    return next(k.category for k in known_frames().frames if k.id == known_id)


def _frame_scores(frames: list[Frame]) -> list[tuple[str, float, int, str]]:
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


def _frame_facts(frames: list[Frame]) -> list[str]:
    if not frames:
        return []
    known = [f for f in frames if f.known]
    top = frames[0]
    text = f"backtrace: {len(frames)} frames, top #{top.number} {top.function}"
    if known:
        text += "; known MNN frames: " + ", ".join(f"#{f.number} {f.function}" for f in known[:5])
    return [text + " (no need to ask for another backtrace)"]



def _tool_step(db: SignatureDB, tool: str, cli: str, why: str) -> NextStep:
    """A step whose line runs as printed: each ``"$NAME"`` in it is explained in ``why`` (what to set it to)."""
    names = list(dict.fromkeys(re.findall(r'"\$([A-Z_]+)"', cli)))
    settings = "; ".join(f"set {n} to {db.variables[n]}" for n in names if n in db.variables)
    return NextStep(tool=tool, cli=cli, why=f"{why.rstrip('.')} ({settings})" if settings else why)
