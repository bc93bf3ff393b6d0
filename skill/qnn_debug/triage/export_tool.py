"""Python errors of MNN's own export and conversion scripts: a class of their own (``export_script_error``).

Why: a ``ValueError: Unsupported visual model`` from ``generate_llm_qnn.py``, a ``NameError`` in ``llmexport.py`` or a
``FileNotFoundError`` for the folder's ``llm_config.json`` stops the script before any QNN code runs; nothing crashed
and no graph was built, so gdb, op lookups or a dump are the wrong first step. The script refused its input (the
folder, its name, an argument, an installed package): ``llm-check`` reads the export folder as the script does and
says what to change. An exception counts when the traceback that raised it, or its own line, names one of MNN's
Python tools (``llmexport``, ``llm_export.py``, ``generate_llm_qnn.py``, ``npu_convert.py``, ``testMNNFromOnnx.py``,
``transformers/llm/export``, MNN's Python package) and it is not the wrapper of a failure printed before it (a crash
or a QNN error keeps its own category: rule 1 of the labelling rule book).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

# A Python exception line: "ValueError: ...", "torch._dynamo.exc.UserError: ...", "KeyError: 'x'", or argparse's
# "prog.py: error: ..." usage error.
_EXCEPTION = re.compile(
    r"^\s*(?P<name>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt))(?::|\s*$)"
    r"|^(?P<prog>[\w.\-]+\.py): error: ", re.MULTILINE)
# MNN's Python tools, as a frame's file, a module path or a command names them.
_MNN_TOOL = re.compile(
    r"(?i)llm_?export(?:\.py)?|generate_llm_qnn|npu_convert\.py|testMNNFromOnnx|fastTestOnnx|testMNNFromT\w+\.py"
    r"|transformers[/\\](?:llm|diffusion)[/\\]export|mnn_converter\.py|site-packages[/\\]MNN[/\\]|_mnncengine"
    r"|\bMNNTools\b|\bpymnn\b|MNN[/\\]tools[/\\]script")
# An exception whose own message reports a QNN/HTP failure (a status, a QNN API or enum, the DSP) is that failure
# raised through MNN's Python package, not the script refusing its input: the other rules read it.
_QNN_FAILURE = re.compile(r"\bQNN_[A-Z_]{3,}|\bQnn[A-Z]\w*_\w+|\bHTP\b|\b[cs]?DSP\b|fastrpc|graph ?finalize|graphExecute"
                          r"|error code \d+|\b(?:1002|1003|3110|6000|6004|7004|14001)\b|\b0x[0-9a-fA-F]{3,8}\b", re.IGNORECASE)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')
_TRACEBACK = "Traceback (most recent call last)"
MAX_MATCHES = 200  # exception lines looked at per chunk
NEAR_LINES = 60  # how far above an exception line its traceback is looked for


@dataclass
class ExportToolScan:
    """Collects, per streamed chunk, the first exception line raised by one of MNN's Python tools."""

    hit: tuple[int, str, str] | None = None  # (1-based line, the exception line, the tool named)

    def feed(self, text: str, base: int) -> None:
        if self.hit is not None or ("rror" not in text and "xception" not in text):
            return
        for m in islice(_EXCEPTION.finditer(text), MAX_MATCHES):
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start : end if end >= 0 else len(text)]
            message = line[m.end() - start :]
            if _QNN_FAILURE.search(message):
                continue
            tool = _tool_of(line, _block_above(text, start), m.group("prog"))
            if tool:
                self.hit = (base + text.count("\n", 0, start) + 1, line.strip()[:300], tool)
                return


def _block_above(text: str, start: int) -> list[str]:
    """The traceback above an exception line: back to its ``Traceback`` header (within NEAR_LINES lines)."""
    above = text[max(0, start - 12000) : start].split("\n")[-NEAR_LINES:]
    for i in range(len(above) - 1, -1, -1):
        if _TRACEBACK in above[i]:
            return above[i:]
    return above[-3:]  # no header: only the lines right above (a frame or a message) count


def _tool_of(line: str, above: list[str], prog: str | None) -> str:
    """The MNN tool an exception line belongs to ('' for none)."""
    if prog:
        m = _MNN_TOOL.search(prog)
        return m.group(0) if m else ""
    frames = [f.group("file") for f in (_FRAME.match(ln) for ln in above) if f]
    for name in reversed(frames):  # the innermost MNN frame names the tool best
        m = _MNN_TOOL.search(name)
        if m:
            return m.group(0)
    m = _MNN_TOOL.search(line)
    return m.group(0) if m else ""


def export_tool_error(text: str) -> tuple[int, str, str] | None:
    """The first exception line of ``text`` raised by one of MNN's Python tools: (1-based line, line, tool)."""
    scan = ExportToolScan()
    scan.feed(text, 0)
    return scan.hit
