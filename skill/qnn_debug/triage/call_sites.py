"""MNN's ``Error in file .../QNNBackend.cpp, line N: error code C`` read back to the QNN call that failed.

Why: MNN's CALL_QNN macro prints only the file, the line and the masked status, so ``error code 1002`` alone
reads as the famous finalize failure even when line 1156 (``contextCreateFromBinary``, the offline path) printed
it. The line table (``data/mnn_qnn_call_lines.json``) is that of one MNN commit; lines move between versions,
so the reading is reported as a fact about that commit and only adds the call's name to what triage reads.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from pydantic import BaseModel

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "mnn_qnn_call_lines.json"
_CALL_QNN = re.compile(r"Error in file (?P<path>[^,\s]*?(?P<file>\w+\.cpp)), line (?P<line>\d+): error code (?P<code>\d+)")


class CallSite(BaseModel):
    file: str
    line: int
    code: int
    call: str
    commit: str

    def fact(self) -> str:
        return (f"{self.file} line {self.line} is {self.call} at MNN {self.commit} (error code {self.code}); "
                "line numbers move between MNN versions")

    def reading(self) -> str:
        """The words triage should also read: the call's name next to its status."""
        return f"{self.call.split(' ')[0]} failed with error code {self.code}"


@cache
def _table() -> tuple[str, dict[str, dict[int, str]]]:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return str(data["commit"]), {f: {int(k): v for k, v in lines.items()} for f, lines in data["files"].items()}


def call_site(line: str) -> CallSite | None:
    """The QNN call behind one MNN ``Error in file ..., line N: error code C`` line, when the table knows it."""
    if "Error in file" not in line:
        return None
    m = _CALL_QNN.search(line)
    if m is None:
        return None
    commit, files = _table()
    call = files.get(m["file"], {}).get(int(m["line"]))
    if call is None:
        return None
    return CallSite(file=m["file"], line=int(m["line"]), code=int(m["code"]), call=call, commit=commit)
