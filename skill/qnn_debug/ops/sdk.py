"""Read op definitions from the user's QNN/QAIRT SDK: ``include/QNN/QnnOpDef.h`` plus the HTML op docs.

The doc folder moves between SDK versions, so the three documents (``MasterOpDef.html``,
``HtpOpDefSupplement.html``, ``SupportedOps.html``) are searched for by name under the SDK root.
HTML is parsed with the standard library's real HTML parser (``html.parser``), never with regexes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

from ..errors import BadInputError
from .models import SdkInfo

DOC_NAMES = ("MasterOpDef.html", "HtpOpDefSupplement.html", "SupportedOps.html")
MAX_WALK_ENTRIES = 50_000
SECTION_CHARS = 4000
_DEFINE = re.compile(r'^\s*#\s*define\s+(QNN_OP_[A-Z0-9_]+)\s+"([^"]*)"', re.MULTILINE)
_VERSION = re.compile(r"(\d+\.\d+\.\d+(?:\.\d+)?)")


def resolve_sdk_root(sdk: str | os.PathLike[str] | None) -> Path | None:
    """The SDK folder given explicitly, else ``$QNN_SDK_ROOT``, else None (lookup then works offline)."""
    value = str(sdk) if sdk is not None else os.environ.get("QNN_SDK_ROOT", "")
    if not value:
        return None
    root = Path(value).expanduser()
    if not root.is_dir():
        where = "--sdk" if sdk is not None else "QNN_SDK_ROOT"
        raise BadInputError(f"QNN SDK folder {root} (from {where}) does not exist",
                            hint="point it at the QAIRT/QNN SDK root (the folder holding include/QNN)")
    return root


@dataclass
class SdkIndex:
    """What one SDK folder offers: op → params from the header, and the doc files found."""

    info: SdkInfo
    ops: dict[str, list[str]] = field(default_factory=dict)

    def op_name(self, query: str) -> str | None:
        key = query.lower()
        return next((name for name in self.ops if name.lower() == key), None)


@lru_cache(maxsize=8)
def _load(root: str, stamp: float) -> SdkIndex:
    path = Path(root)
    info = SdkInfo(root=root, version=_version(path))
    index = SdkIndex(info=info)
    header = path / "include" / "QNN" / "QnnOpDef.h"
    found = _find_files(path, ("QnnOpDef.h", *DOC_NAMES))
    header = header if header.is_file() else found.get("QnnOpDef.h", header)
    if header.is_file():
        info.op_def_header = str(header)
        index.ops = parse_op_def_header(header.read_text(encoding="utf-8", errors="replace"))
    else:
        info.notes.append("include/QNN/QnnOpDef.h not found: op and parameter names come from the curated file")
    for name in DOC_NAMES:
        if name in found:
            info.docs[name] = str(found[name])
        else:
            info.notes.append(f"{name} not found under the SDK root")
    return index


def load_sdk(root: Path) -> SdkIndex:
    """Index an SDK folder (cached per folder and modification time)."""
    return _load(str(root.resolve()), root.stat().st_mtime)


def _version(root: Path) -> str | None:
    for candidate in (root.name, root.parent.name):
        m = _VERSION.search(candidate)
        if m:
            return m.group(1)
    for name in ("sdk.yaml", "version.txt", "VERSION"):
        f = root / name
        if f.is_file():
            m = _VERSION.search(f.read_text(encoding="utf-8", errors="replace")[:2000])
            if m:
                return m.group(1)
    return None


def _find_files(root: Path, names: tuple[str, ...]) -> dict[str, Path]:
    """Breadth-limited walk: the first file with each wanted name (docs folders differ by SDK version)."""
    wanted = set(names)
    found: dict[str, Path] = {}
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in filenames:
            if fn in wanted and fn not in found:
                found[fn] = Path(dirpath) / fn
        seen += len(filenames) + len(dirnames)
        if len(found) == len(wanted) or seen > MAX_WALK_ENTRIES:
            break
    return found


def parse_op_def_header(text: str) -> dict[str, list[str]]:
    """``QNN_OP_CONV_2D "Conv2d"`` + ``QNN_OP_CONV_2D_PARAM_STRIDE "stride"`` → ``{"Conv2d": ["stride", ...]}``."""
    defines = dict(_DEFINE.findall(text))
    ops = {macro: value for macro, value in defines.items() if "_PARAM_" not in macro and value}
    params: dict[str, list[str]] = {value: [] for value in ops.values()}
    for macro, value in defines.items():
        if "_PARAM_" not in macro:
            continue
        owner = macro.split("_PARAM_")[0]
        if owner in ops:
            params[ops[owner]].append(value)
    return params


class _Blocks(HTMLParser):
    """Flattens HTML into headings, text blocks and table rows, in document order."""

    BLOCK: ClassVar[frozenset[str]] = frozenset({"p", "li", "dt", "dd", "pre", "div", "caption"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[tuple[str, int, object]] = []  # (kind, level, payload)
        self._text: list[str] = []
        self._heading: int | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._heading = int(tag[1])
        elif tag == "tr":
            self._flush()
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag in self.BLOCK or tag == "br":
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        elif re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            text = _norm("".join(self._text))
            self._text = []
            if text:
                self.items.append(("h", self._heading, text))
            self._heading = None
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(_norm("".join(self._cell)))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if any(self._row):
                self.items.append(("row", 0, self._row))
            self._row = None
        elif tag in self.BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._cell is not None:
            self._cell.append(data)
        else:
            self._text.append(data)

    def _flush(self) -> None:
        if self._heading is None:
            text = _norm("".join(self._text))
            if text:
                self.items.append(("text", 0, text))
            self._text = []


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@lru_cache(maxsize=16)
def _blocks(path: str, stamp: float) -> list[tuple[str, int, object]]:
    parser = _Blocks()
    parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    parser.close()
    parser._flush()
    return parser.items


def doc_section(path: str, op: str) -> str | None:
    """Text of the section whose heading names ``op`` (up to the next heading of the same or higher level)."""
    items = _blocks(path, Path(path).stat().st_mtime)
    key = op.lower()
    out: list[str] = []
    level: int | None = None
    for kind, lvl, payload in items:
        if kind == "h":
            heading = str(payload)
            words = heading.lower().replace("¶", "").split()
            if level is not None and lvl <= level:
                break
            if level is None and words and (words[0] == key or heading.lower().strip(" ¶") == key):
                level = lvl
                continue
        if level is not None:
            out.append(" | ".join(payload) if isinstance(payload, list) else str(payload))
    if level is None:
        return None
    return "\n".join(out)[:SECTION_CHARS]


def supported_ops_row(path: str, op: str) -> dict[str, str]:
    """The SupportedOps.html table row of ``op`` keyed by the column headers (e.g. backend → support)."""
    items = _blocks(path, Path(path).stat().st_mtime)
    header: list[str] = []
    key = op.lower()
    for kind, _lvl, payload in items:
        if kind != "row" or not isinstance(payload, list):
            continue
        if not header or (payload and payload[0].lower() in ("operation", "op", "op name", "operator")):
            header = payload
            continue
        if payload and payload[0].lower() == key:
            return {(header[i] if i < len(header) else f"col{i}"): cell for i, cell in enumerate(payload[1:], start=1)}
    return {}
