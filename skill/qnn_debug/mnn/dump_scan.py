"""Scan an MNN QNN dump directory: its manifests (``manifest_NNNNNN.tsv``), their rows, and which files are stale.

MNN never clears the dump directory and restarts numbering at 0 each run, so files of an older, longer run linger:
they are detected by content (raw files of execution 0 the latest manifest does not list, later manifests listing
exactly those tensors) as well as by timestamps, and reported (:func:`unaligned_files`) instead of read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError

MANIFEST_HEADER = ["index", "name", "file", "data_type", "dimensions", "quant_encoding", "scale", "offset"]
_MANIFEST_RE = re.compile(r"^manifest_(\d{6,})\.tsv$")
RAW_FILE_RE = re.compile(r"^execution_(\d{6,})_tensor_(\d{4,})_.*\.raw$")
DUMP_SUBDIR = "qnn_intermediate_outputs"
MAX_MANIFEST_BYTES = 64 << 20
STALE_TOLERANCE_NS = 1_000_000_000


class DumpEntry(BaseModel):
    """One manifest row, as MNN printed it."""

    index: int
    name: str
    file: str
    data_type: int
    dims: list[int]
    quant_encoding: int
    scale: float
    offset: int
    line: int


class DumpExecution(BaseModel):
    """One graph execution: its manifest and rows."""

    number: int
    manifest: str
    mtime_ns: int
    entries: list[DumpEntry]
    stale: bool = False  # left over from an older run (see scan_dump_dir)
    malformed: list[str] = Field(default_factory=list)  # rows that could not be parsed ("<manifest> row N: ...")


class DumpDirectory(BaseModel):
    """A scanned dump directory: executions (oldest number first), stray files, problems found."""

    path: str
    executions: list[DumpExecution]
    unlisted_files: list[str] = Field(default_factory=list)  # raw files in no manifest of this run
    problems: list[str] = Field(default_factory=list)

    def execution(self, number: int | None = None) -> DumpExecution:
        """The chosen execution; default the newest of the most recent run."""
        current = [e for e in self.executions if not e.stale]
        if number is None:
            return (current or self.executions)[-1]
        for e in self.executions:
            if e.number == number:
                return e
        have = ", ".join(str(e.number) for e in self.executions)
        raise BadInputError(f"dump {self.path} has no execution {number}", hint=f"choose one of: {have}")


def find_dump_dir(path: str | os.PathLike[str]) -> Path:
    """Accept the dump dir itself or a directory holding ``qnn_intermediate_outputs/``."""
    p = fs.check(path, what="dump directory", must_exist=False)
    if not p.is_dir():
        raise BadInputError(f"dump directory {p} does not exist", hint="pass the qnn_intermediate_outputs directory")
    if not any(_MANIFEST_RE.match(f.name) for f in p.iterdir()) and (p / DUMP_SUBDIR).is_dir():
        return p / DUMP_SUBDIR
    return p


def scan_dump_dir(path: str | os.PathLike[str]) -> DumpDirectory:
    """Parse every manifest in a dump directory and find stale or stray files."""
    p = find_dump_dir(path)
    manifests = sorted(
        ((int(m.group(1)), f) for f in p.iterdir() if (m := _MANIFEST_RE.match(f.name)) and f.is_file()),
    )
    if not manifests:
        raise BadInputError(
            f"{p} holds no QNN dump manifest (manifest_NNNNNN.tsv)",
            hint="dumps come from an MNN2QNNModel --dump_intermediate_outputs model or an online run with "
            "MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS; check MNN_QNN_DUMP_DIR and the run's log",
        )
    problems: list[str] = []
    executions = [_read_manifest(f, number, problems) for number, f in manifests]
    _mark_stale(executions, problems)
    _mark_stale_by_content(executions, {f.name for f in p.iterdir() if RAW_FILE_RE.match(f.name)}, problems)
    listed = {(e.number, r.file) for e in executions if not e.stale for r in e.entries}
    current_numbers = {e.number for e in executions if not e.stale}
    unlisted = []
    for f in sorted(p.iterdir()):
        m = RAW_FILE_RE.match(f.name)
        if m and (int(m.group(1)), f.name) not in listed:
            unlisted.append(f.name)
            if int(m.group(1)) in current_numbers:
                problems.append(f"{f.name} is in no manifest of the latest run: left over from an older run")
    if any(e.stale for e in executions):
        stale = [e.manifest for e in executions if e.stale]
        problems.append(
            f"{', '.join(stale)} predate(s) the latest run (MNN never clears the dump directory); "
            "clear the directory before each run"
        )
    return DumpDirectory(path=str(p), executions=executions, unlisted_files=unlisted, problems=problems)


def _read_manifest(path: Path, number: int, problems: list[str]) -> DumpExecution:
    text = fs.read_text(path, what="dump manifest", max_bytes=MAX_MANIFEST_BYTES, errors="surrogateescape")
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r").split("\t") != MANIFEST_HEADER:
        raise BadInputError(
            f"{path} is not an MNN QNN dump manifest (unexpected header {lines[0][:80]!r})",
            hint="expected the tab-separated header: " + " ".join(MANIFEST_HEADER),
        )
    entries: list[DumpEntry] = []
    malformed: list[str] = []
    for lineno, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line:
            continue
        entry = _parse_row(line, lineno)
        if entry is None:
            problems.append(f"{path.name}:{lineno}: malformed row {json_safe(line[:120])!r} (skipped)")
            malformed.append(f"{path.name} row {lineno}: malformed row {json_safe(line[:120])!r}")
            continue
        entries.append(entry)
    return DumpExecution(number=number, manifest=path.name, mtime_ns=path.stat().st_mtime_ns, entries=entries,
                         malformed=malformed)


def _parse_row(line: str, lineno: int) -> DumpEntry | None:
    """8 tab-separated fields; a name containing a tab (never escaped by MNN) is re-joined."""
    fields = line.split("\t")
    if len(fields) < 8:
        return None
    name = "\t".join(fields[1:-6])
    file, dtype, dims, enc, scale, offset = fields[-6:]
    try:
        return DumpEntry(
            index=int(fields[0]),
            name=json_safe(name),
            file=file,
            data_type=int(dtype),
            dims=[int(d) for d in dims.split("x")] if dims else [],
            quant_encoding=int(enc),
            scale=float(scale),
            offset=int(offset),
            line=lineno,
        )
    except ValueError:
        return None


def _mark_stale(executions: list[DumpExecution], problems: list[str]) -> None:
    """A run writes manifests 0, 1, 2, … in time order; one clearly older than its predecessor is left over.

    The tolerance keeps a copy without preserved timestamps (``cp`` without ``-p``; we pull with
    ``adb pull -a``), which stamps files in arbitrary order within moments, from looking stale.
    """
    for i in range(1, len(executions)):
        prev, cur = executions[i - 1], executions[i]
        older = prev.mtime_ns - cur.mtime_ns
        if prev.stale or cur.number != prev.number + 1 or older > STALE_TOLERANCE_NS:
            cur.stale = True
            if not prev.stale:
                why = (f"{older / 1e9:.1f} s older than {prev.manifest}" if older > STALE_TOLERANCE_NS
                       else f"numbering jumps from {prev.number}")
                problems.append(f"{cur.manifest} is {why}")
    if executions and executions[0].number != 0:
        problems.append(f"no manifest_000000.tsv: the dump starts at {executions[0].manifest}; "
                        "files are missing or belong to another run")


def _mark_stale_by_content(executions: list[DumpExecution], raw_files: set[str], problems: list[str]) -> None:
    """Find executions of an earlier, longer run from the files themselves, not their timestamps.

    MNN restarts numbering at 0 and overwrites only the files it writes, so an earlier run with more
    tensors leaves raw files of execution 0 that the latest ``manifest_000000.tsv`` does not list. A later
    manifest listing exactly such a tensor (same index and name) was written by that earlier run: it is
    stale even when a copy without timestamps made the mtimes useless.
    """
    current = [e for e in executions if not e.stale]
    if not current:
        return
    first = current[0]
    listed = {r.file for r in first.entries}
    leftovers = {f for f in raw_files if f.startswith(f"execution_{first.number:06d}_") and f not in listed}
    if not leftovers:
        return
    for e in current[1:]:
        prefix = f"execution_{e.number:06d}_"
        hit = next((r for r in e.entries if r.file.startswith(prefix)
                    and f"execution_{first.number:06d}_" + r.file[len(prefix):] in leftovers), None)
        if hit is not None:
            e.stale = True
            problems.append(f"{e.manifest} lists tensor {hit.name!r} (row {hit.line}) that {first.manifest} of the "
                            "latest run does not, while its execution-0 file is still present: left over from an "
                            "earlier, longer run")
    stale = [i for i, e in enumerate(executions) if e.stale]
    for i in range(min(stale, default=len(executions)), len(executions)):  # numbering is contiguous per run
        executions[i].stale = True


def unaligned_files(scan: DumpDirectory, chosen: DumpExecution) -> list[dict[str, str]]:
    """Raw files numbered like the chosen execution that its manifest does not list, each with the reason:
    reported as explicit unaligned rows, never read."""
    prefix = f"execution_{chosen.number:06d}_"
    listed = {r.file for r in chosen.entries}
    return [{"file": f, "reason": f"present in the dump folder but not listed in {chosen.manifest}: left over from "
             "an earlier, longer run (not read)"} for f in scan.unlisted_files if f.startswith(prefix) and f not in listed]


def json_safe(text: str) -> str:
    """``text`` as valid Unicode: bytes that were not UTF-8 (kept as lone surrogates) become U+FFFD."""
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace") \
        if any("\ud800" <= c <= "\udfff" for c in text) else text
