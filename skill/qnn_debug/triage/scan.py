"""Scanning a log: match the signatures, noise, clues, frames, commands and structure readers chunk by chunk.

Each chunk is searched only for signatures whose literal anchors occur in it (``bytes in`` runs at memory speed), so a
100 MB log takes seconds; noise lines are blanked but not deleted, so line numbers stay exact. :class:`Scan` keeps
bounded evidence per signature and the counters the decision reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from .backtrace import Frame, parse_frames
from .call_sites import CallSite, call_site
from .cases import CaseMatcher
from .commands import STEP_MARKERS, CommandLine, find_commands
from .export_tool import ExportToolScan
from .outside import OutsideScan
from .signatures import Signature, SignatureDB
from .similar import SimilarFeed
from .stream import clean, lines_aligned
from .structure import StructureScan
from .weights import (
    EVIDENCE_TEXT_CHARS,
    HEAD_CHARS,
    MAX_CALL_SITES,
    MAX_COMMANDS,
    MAX_COUNTED_MATCHES,
    MAX_EVIDENCE_PER_SIGNATURE,
    MAX_FRAMES,
    MAX_GENERIC_LINES,
    TAIL_CHARS,
    TAIL_LINES,
)

_GENERIC = re.compile(r"(?i)\b(?:error|fail(?:ed|ure)?|segmentation fault)\b")
_GENERIC_ANCHORS = (b"rror", b"RROR", b"ail", b"AIL", b"egmentation")
_FRAME_HINT = re.compile(rb"(?m)^\s*(?:\*\s*)?(?:frame\s+)?#\d|DEBUG\s*:\s+#\d")
_COMMAND_ANCHORS = (b"llmexport", b"generate_llm_qnn", b"compilefornpu", b"MNN2QNNModel", b"npu_convert", b"generateIO")


@dataclass
class _SigState:
    count: int = 0
    evidence: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)


@dataclass
class Scan:
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
    export_tool: ExportToolScan = field(default_factory=ExportToolScan)


def scan_chunks(scan: Scan, chunks: Iterator[bytes]) -> None:
    sigs = scan.db.signatures
    context_literals = {lit for s in sigs for lit in s.requires_any}
    anchors = {a: a.encode("utf-8") for s in sigs if not s.head_only for a in s.anchors}
    anchors.update({a: a.encode("utf-8") for n in scan.db.noise for a in n.anchors})
    # Each absent anchor costs a full scan of the chunk, so anchors that are not ASCII (Chinese words) are only
    # looked for in chunks that are not pure ASCII: they cannot occur in one.
    narrow = {a: b for a, b in anchors.items() if b.isascii()}
    wide = {a: b for a, b in anchors.items() if not b.isascii()}
    for raw in lines_aligned(chunks):
        scan.bytes += len(raw)
        if b"Error in file" in raw:
            raw = _read_call_sites(scan, raw)
        ascii_only = raw.isascii()
        # Anchor presence is tested once per chunk on the raw bytes (memchr speed), shared by all signatures.
        present = {a for a, b in narrow.items() if b in raw}
        if not ascii_only:
            present.update(a for a, b in wide.items() if b in raw)
        text, bad = clean(raw)
        scan.bad_bytes += bad
        base = scan.lines
        _remember_tail(scan, text, base)
        text = _blank_noise(scan, text, base, present)
        scan.similar.feed(text)
        scan.outside.feed(text, base)
        scan.export_tool.feed(text, base)
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
        if len(scan.generic) < MAX_GENERIC_LINES and any(a in raw for a in _GENERIC_ANCHORS):
            for m in islice(_GENERIC.finditer(text), MAX_GENERIC_LINES - len(scan.generic)):
                scan.generic.append(_line_at(text, m.start(), base))
        scan.lines += text.count("\n")
    if scan.bytes and not scan.lines:
        scan.lines = 1


CALL_NOTE = re.compile(r" \[MNN \w+ line table: [^\]]*\]")  # what _read_call_sites adds; evidence stays verbatim


def _read_call_sites(scan: Scan, raw: bytes) -> bytes:
    """Name the QNN call behind each MNN ``Error in file ..., line N: error code C`` line (same line, so line
    numbers stay exact), so that the signatures read ``contextCreateFromBinary failed ...`` and not a bare code."""
    out = []
    for line in raw.split(b"\n"):
        site = call_site(line.decode("utf-8", "replace")) if b"Error in file" in line else None
        if site is not None:
            if len(scan.call_sites) < MAX_CALL_SITES and site not in scan.call_sites:
                scan.call_sites.append(site)
            note = f" [MNN {site.commit} line table: {site.reading()}]".encode()
            line = line[:-1] + note + b"\r" if line.endswith(b"\r") else line + note
        out.append(line)
    return b"\n".join(out)


def _scan_structure(scan: Scan, raw: bytes, text: str, base: int) -> None:
    """Backtrace frames, export command lines and markers, clues and past cases of one chunk."""
    if len(scan.frames) < MAX_FRAMES and _FRAME_HINT.search(raw):
        scan.frames.extend(parse_frames(text, base, limit=MAX_FRAMES - len(scan.frames)))
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


def _blank_noise(scan: Scan, text: str, base: int, present: set[str]) -> str:
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


def _match(scan: Scan, sig: Signature, text: str, base: int) -> None:
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


def _remember_tail(scan: Scan, text: str, base: int) -> None:
    lines = (text if len(text) < TAIL_CHARS else text[-TAIL_CHARS:]).rstrip("\n").split("\n")[-TAIL_LINES:]
    total = text.count("\n")
    first_no = base + total - len(lines) + (0 if text.endswith("\n") else 1) + 1
    for i, line in enumerate(lines):
        if line.strip():
            scan.tail.append((first_no + i, line.strip()[:EVIDENCE_TEXT_CHARS]))
    scan.tail = scan.tail[-TAIL_LINES:]
