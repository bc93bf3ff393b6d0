"""Backtraces in a log: gdb/lldb frames and Android tombstone lines, matched to known MNN functions.

Why: a crash report often carries the one thing that names the cause — the frames. A full backtrace
through ``QnnFloatToHalf <- createStaticFloatTensor <- getTensorIdx`` says far more than a bare
"Segmentation fault", and an assistant must never ask for a backtrace the user already gave. The known
functions live in ``data/known_frames.json`` (each with its category, weight and source).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "known_frames.json"
MAX_FRAMES = 64

# gdb:   "#3  0x00007f.. in MNN::QnnBackend::getTensorIdx (this=..) at /x/QNNBackend.cpp:2109"
#        "#1 QNNTensorWrapper::createStaticFloatTensor("
# lldb:  "frame #2: 0x0000 libMNN.so`MNN::QNN::QnnFloatToHalf(...) + 24 at QNNUtils.cpp:88"
# tomb:  "#00 pc 00000000001a2b3c  /data/local/tmp/libMNN.so (MNN::QNN::QnnFloatToHalf(float const*, ...)+12)"
_GDB = re.compile(r"^\s*#(?P<n>\d{1,3})\s+(?:0x[0-9a-fA-F]+\s+in\s+)?(?P<func>[A-Za-z_~][\w:<>~,\s*&]*?)\s*\((?P<rest>[^\n]*)$", re.MULTILINE)
_LLDB = re.compile(r"^\s*\*?\s*frame\s+#(?P<n>\d{1,3}):\s+0x[0-9a-fA-F]+\s+(?P<lib>[^`\s]+)`(?P<func>[^(\n]+)", re.MULTILINE)
# tombstone lines may carry a logcat prefix ("12-07 04:15:01.338  1234  1234 F DEBUG   :   #00 pc ...")
_TOMB = re.compile(r"^(?:[^\n#]{0,80}?\bDEBUG\s*:)?\s*#(?P<n>\d{2,3})\s+pc\s+[0-9a-fA-F]+\s+(?P<lib>\S+)(?:\s+\((?P<func>[^+)\n(]+)[^\n]*\))?", re.MULTILINE)
_FILE = re.compile(r"\bat\s+(?P<file>[\w./\\-]+\.(?:cpp|cc|c|hpp|h)):(?P<line>\d+)")


class Frame(BaseModel):
    """One parsed frame: its number, function (namespaces kept), library and source position when given."""

    number: int
    function: str
    log_line: int = 0
    library: str | None = None
    file: str | None = None
    line: int | None = None
    known: str | None = Field(default=None, description="id of the known MNN function it matched")


class KnownFrame(BaseModel):
    id: str
    function: str = Field(description="regex on the frame's function name")
    category: str
    weight: float
    why: str
    source: str


class FrameDB(BaseModel):
    about: str
    full_backtrace_frames: int = Field(description="known frames of one category that make a full matching backtrace")
    full_backtrace_bonus: float
    frames: list[KnownFrame]


@cache
def known_frames(path: Path = DATA_FILE) -> FrameDB:
    db = FrameDB.model_validate(json.loads(path.read_text(encoding="utf-8")))
    for f in db.frames:
        re.compile(f.function)
    return db


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def parse_frames(text: str, base_line: int = 0, limit: int = MAX_FRAMES) -> list[Frame]:
    """Every frame-looking line of ``text`` (gdb, lldb, tombstone), first ``limit`` ones, in text order."""
    found: list[tuple[int, Frame]] = []
    for m in _TOMB.finditer(text):
        func = (m.group("func") or "").strip()
        found.append((m.start(), Frame(number=int(m.group("n")), function=func or "?", library=m.group("lib"))))
    taken = {pos for pos, _ in found}
    for m in _LLDB.finditer(text):
        found.append((m.start(), Frame(number=int(m.group("n")), function=m.group("func").strip(), library=m.group("lib"))))
    for m in _GDB.finditer(text):
        if m.start() in taken or re.match(r"\s*#\d+\s+pc\s", text[m.start():m.start() + 20]):
            continue
        func = m.group("func").strip()
        loc = _FILE.search(m.group("rest"))
        found.append((m.start(), Frame(number=int(m.group("n")), function=func,
                                       file=loc.group("file") if loc else None,
                                       line=int(loc.group("line")) if loc else None)))
    found.sort(key=lambda t: t[0])
    frames = []
    for pos, f in found[:limit]:
        f.log_line = base_line + text.count("\n", 0, pos) + 1
        frames.append(f)
    db = known_frames()
    for frame in frames:
        for k in db.frames:
            if _compiled(k.function).search(frame.function):
                frame.known = k.id
                break
    return frames
