"""TEST DOUBLE that replays a real MNN tool's recorded output — a stand-in, not MNN's tool.

It prints the log named by ``$REPLAY_MNN_LOG`` (one of ``fixtures/mnn-host-real``: the unedited output of a
real MNN build) and ends the way the real tool ended: the exit status of the log's last ``rc=N`` line (that
line is the recorder's, not the tool's, and is not printed), or SIGSEGV after a ``Segmentation fault`` line.
The environment it was started with (``QNN_SDK_ROOT``, ``LD_LIBRARY_PATH``, ``MNN_QNN_DUMP_DIR``, argv) goes to
``$REPLAY_ENV_LOG``. With ``$REPLAY_DUMP`` (a real QNN dump folder recorded with the log) the folder's files are
copied to ``$MNN_QNN_DUMP_DIR`` before the log is printed, as MNN's QNN backend writes them during the forward pass.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys


def main(argv: list[str]) -> int:
    if os.environ.get("REPLAY_ENV_LOG"):
        with open(os.environ["REPLAY_ENV_LOG"], "w", encoding="utf-8") as f:
            json.dump({"argv": argv, "QNN_SDK_ROOT": os.environ.get("QNN_SDK_ROOT"),
                       "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""),
                       "MNN_QNN_DUMP_DIR": os.environ.get("MNN_QNN_DUMP_DIR")}, f)
    if os.environ.get("REPLAY_DUMP"):
        shutil.copytree(os.environ["REPLAY_DUMP"], os.environ["MNN_QNN_DUMP_DIR"], dirs_exist_ok=True)
    with open(os.environ["REPLAY_MNN_LOG"], encoding="utf-8") as f:
        lines = f.read().splitlines()
    rc = 0
    if lines and (m := re.fullmatch(r"rc=(-?\d+)", lines[-1].strip())):
        rc, lines = int(m.group(1)), lines[:-1]
    crash = bool(lines) and lines[-1].startswith("Segmentation fault")
    if crash:
        lines = lines[:-1]  # the shell printed that line about the dead process, not the tool
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    if crash:
        os.kill(os.getpid(), signal.SIGSEGV)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
