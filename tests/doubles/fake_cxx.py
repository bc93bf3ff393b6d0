"""TEST DOUBLE for a C++ compiler — a stand-in, not a compiler.

``fake_cxx.py ... -o OUT`` writes OUT as an executable that runs ``replay_mnn_tool.py`` (which replays a real
MNN run recorded with qnn-debug's runner). The argv it was given goes to ``$FAKE_CXX_LOG`` (one JSON line per
call), so a test sees what the host target compiled against; ``$FAKE_CXX_FAIL`` makes it fail like g++ does.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_CXX_LOG"):
        with open(os.environ["FAKE_CXX_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps(argv[1:]) + "\n")
    if os.environ.get("FAKE_CXX_FAIL"):
        print(os.environ["FAKE_CXX_FAIL"])
        return 1
    out = Path(argv[argv.index("-o") + 1])
    replay = Path(__file__).with_name("replay_mnn_tool.py")
    out.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{replay}" "$@"\n', encoding="utf-8")
    out.chmod(out.stat().st_mode | stat.S_IXUSR)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
