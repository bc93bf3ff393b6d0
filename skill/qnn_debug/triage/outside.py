"""Failures outside QNN: a plain Python error in a user's script or a config validation, an app's own platform check.

Why: rule 4 of the labelling rule book says such a log is ``other``, however QNN-flavoured the thread's title is. A
Python ``IndexError``/``KeyError``/``TypeError``/``ValueError``, a pydantic ``type=value_error`` or an argparse usage
error is outside QNN only when its failing lines (the exception line and the frames just above it) name nothing of
QNN, HTP, the DSP or MNN: a ``KeyError`` raised in a QNN partitioner (an op with no node visitor) or a ``ValueError``
that wraps a QNN status is a QNN failure and is left to the other rules. An app that refuses to start because its
own allow-list has no entry for the CPU or platform never reached QNN either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

# The exception line of a Python traceback (possibly module-qualified), a pydantic validation error, argparse's
# usage error.
_SCRIPT_ERROR = re.compile(
    r"^\s*(?:[\w.]+\.)?(?:IndexError|KeyError|TypeError|ValueError)(?::|\s*$)"
    r"|\(type=(?:value|type|assertion)_error[\w.]*\)|\b\d+ validation errors? for [A-Z]\w+"
    r"|^[\w.\-]+(?:\.py)?: error: (?:argument |unrecognized arguments|the following arguments are required|invalid choice)",
    re.MULTILINE)
# An app's own allow-list check: it says the platform or CPU is not supported, or that no valid processor was found.
_APP_CHECK = re.compile(
    r"(?i)\bnot supported on this (?:platform|device|machine|system|cpu|processor|pc|laptop|computer|hardware)\b"
    r"|\bno (?:valid|supported|compatible) (?:cpus?|cpu/npu|processors?|platforms?)"
    r"(?: was| were| is)? (?:found|detected)\b"
    r"|\b(?:unsupported|invalid) (?:cpu|processor|platform)\b")
# Anything that puts a script error's failing lines inside QNN or MNN (or a QNN status / library on the same line).
_QNN_WORDS = re.compile(r"(?i)qnn|\bhtp|hexagon|\bdsp|fastrpc|\bmnn|qairt|snpe|qualcomm|\bgenie|\.so\b|\.dll\b"
                        r"|error code|\b0x[0-9a-f]{3,8}\b|\b(?:1002|1003|3110|6000|6004|7004)\b")
# An app's check names its own QNN service freely ("QNN engine is not supported on this platform"): it is inside QNN
# only when the line carries what QNN itself reports (a status, a code, a library, a failed call).
_QNN_REPORTS = re.compile(r"(?i)\.so\b|\.dll\b|error code|\b0x[0-9a-f]{3,8}\b|\b\d{4,5}\b|\bQNN_[A-Z_]+|\bQnn[A-Z]\w*_\w+"
                          r"|\bfail(?:ed|ure)\b|\bstatus\b|\b(?:HTP|DSP|cDSP|Hexagon|backend|delegate|EP|execution provider)\b")
_CLAUSE = re.compile(r"[,;:]\s")  # a prose line's clauses: "... for QNN EP, getting Invalid engine (type=value_error)"
FRAMES_ABOVE = 4  # a traceback's last frames: the code that raised the error
MAX_MATCHES = 200  # error lines looked at per chunk (a log repeating one error thousands of times costs no more)
NEAR_CHARS = 2000  # how far around an error line its frames and message are looked for


@dataclass
class OutsideScan:
    """Collects, per streamed chunk, the first error line outside QNN (line number and text)."""

    hit: tuple[int, str] | None = None

    def feed(self, text: str, base: int) -> None:
        if self.hit is not None:
            return
        # cheap literal tests first: a 4 MiB chunk with none of these words holds neither kind of error
        kinds = [rx for rx, words in ((_SCRIPT_ERROR, ("rror",)), (_APP_CHECK, ("upported", "nvalid", "UPPORTED", "NVALID")))
                 if any(w in text for w in words)]
        for rx in kinds:
            for m in islice(rx.finditer(text), MAX_MATCHES):
                start = text.rfind("\n", 0, m.start()) + 1
                end = text.find("\n", m.end())
                line = text[start : end if end >= 0 else len(text)]
                quoted = m.start() > start and not line[: m.start() - start].isspace()
                if quoted and rx is _SCRIPT_ERROR:
                    # mid-line (a title or a sentence quoting the error): only the clause holding it is the failing line
                    cuts = [c.end() for c in _CLAUSE.finditer(line, 0, m.start() - start)]
                    line = line[cuts[-1] if cuts else 0 :]
                above = text[max(0, start - NEAR_CHARS) : start].split("\n")[-FRAMES_ABOVE - 1 :]
                # an exception's message may go on for a few lines (pybind lists the signatures it accepts)
                near = text[end + 1 : end + 1 + NEAR_CHARS] if end >= 0 and rx is _SCRIPT_ERROR and not quoted else ""
                below = near.split("\n", 3)[:3] if near else []
                failing = [line, *below] + ([ln for ln in above if _is_frame(ln)] if rx is _SCRIPT_ERROR else [])
                inside = _QNN_WORDS if rx is _SCRIPT_ERROR else _QNN_REPORTS
                if any(inside.search(ln) for ln in failing):
                    continue
                line_no = base + text.count("\n", 0, start) + 1
                if self.hit is None or line_no < self.hit[0]:
                    self.hit = (line_no, line.strip()[:300])
                break


_FRAME = re.compile(r'^\s*File "[^"]*", line \d+|^\s{2,}\S')


def _is_frame(line: str) -> bool:
    """A traceback frame (``File "...", line N``) or the indented source line under it."""
    return _FRAME.match(line) is not None


def outside_qnn(text: str) -> tuple[int, str] | None:
    """The first error line of ``text`` that is a script, config or app-check error outside QNN (1-based line)."""
    scan = OutsideScan()
    scan.feed(text, 0)
    return scan.hit
