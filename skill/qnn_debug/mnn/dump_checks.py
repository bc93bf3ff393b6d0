"""Refuse a damaged dump before reading it: impossible dimensions, raw files of the wrong size, file names whose
execution/tensor numbers disagree with their manifest and row."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import fs
from ..errors import BadInputError
from .dump_scan import RAW_FILE_RE, DumpDirectory, DumpEntry, DumpExecution
from .qnn_types import ENC_SCALE_OFFSET, data_type

MAX_RANK = 16
MAX_DIM = (1 << 31) - 1
MAX_ELEMENTS = 1 << 32
MAX_LISTED_PROBLEMS = 8


def element_count(entry: DumpEntry) -> int:
    check_dims(entry)
    count = 1
    for d in entry.dims:
        count *= d
    return count


def check_dims(entry: DumpEntry) -> None:
    """Dimensions positive and bounded, so no size computation can overflow or allocate absurdly."""
    where = f"manifest row {entry.line} ({entry.name!r})"
    if len(entry.dims) > MAX_RANK:
        raise BadInputError(f"{where} has {len(entry.dims)} dimensions (at most {MAX_RANK})",
                            hint="the manifest is damaged; re-run with a cleared dump directory")
    bad = [d for d in entry.dims if d < 1 or d > MAX_DIM]
    if bad:
        raise BadInputError(f"{where} has dimension {bad[0]} (each must be 1..{MAX_DIM})",
                            hint="the manifest is damaged; re-run with a cleared dump directory")
    count = 1
    for d in entry.dims:
        count *= d
    if count > MAX_ELEMENTS:
        raise BadInputError(f"{where} declares {count} elements (at most {MAX_ELEMENTS})",
                            hint="the manifest is damaged; re-run with a cleared dump directory")


def row_problem(dump_dir: Path, entry: DumpEntry, execution: int | None = None) -> str | None:
    """Why one manifest row cannot be trusted (file, type, size, dims, scale, numbering), or None. Cheap: no
    data is read. ``execution``: the number of the manifest the row is in (its files carry that number)."""
    import math

    if not entry.file or "/" in entry.file or "\\" in entry.file or entry.file in (".", ".."):
        return f"names an unsafe file {entry.file[:100]!r}"
    numbered = RAW_FILE_RE.match(entry.file)
    if numbered and execution is not None and int(numbered.group(1)) != execution:
        return (f"names a file of execution {int(numbered.group(1))}, not {execution}: a stale or renamed "
                "manifest mixes runs")
    if numbered and int(numbered.group(2)) != entry.index:
        return f"names the file of tensor {int(numbered.group(2))} in row index {entry.index}: rows and files disagree"
    try:
        count = element_count(entry)
    except BadInputError as e:
        return e.message
    dt = data_type(entry.data_type)
    if dt is None or dt.numpy is None:
        return f"has QNN data type {dt.name if dt else f'code {entry.data_type}'}, which has no host representation"
    if not math.isfinite(entry.scale):
        return f"has a non-finite scale {entry.scale}"
    if dt.fixed_point and entry.quant_encoding == ENC_SCALE_OFFSET and entry.scale == 0:
        return "has SCALE_OFFSET encoding with scale 0 (values cannot be dequantized)"
    path = dump_dir / entry.file
    try:
        real = fs.check(path, what="raw file", kind="file")
    except BadInputError as e:
        return "raw file is missing" if not os.path.lexists(path) else e.message
    size = real.stat().st_size
    expected = count * np.dtype(dt.numpy).itemsize
    if size != expected:
        return f"raw file has {size} bytes, expected {expected} for {dt.name} {entry.dims}"
    return None


def refuse_damaged(scan: DumpDirectory, chosen: DumpExecution) -> None:
    """Raise one :class:`BadInputError` listing every damaged row of the chosen execution (file and row)."""
    problems = list(chosen.malformed)
    for entry in chosen.entries:
        why = row_problem(Path(scan.path), entry, chosen.number)
        if why is not None:
            problems.append(f"{chosen.manifest} row {entry.line} ({entry.name!r}, {entry.file[:100]}): {why}")
    if problems:
        shown = "; ".join(problems[:MAX_LISTED_PROBLEMS])
        more = f" and {len(problems) - MAX_LISTED_PROBLEMS} more" if len(problems) > MAX_LISTED_PROBLEMS else ""
        raise BadInputError(
            f"dump {scan.path} execution {chosen.number} is damaged: {shown}{more}",
            hint="pull the whole dump directory again, or clear it and re-run the model; a damaged dump is never "
            "compared", details={"problems": problems[:100]},
        )
