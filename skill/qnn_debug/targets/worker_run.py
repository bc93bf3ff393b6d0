"""Run a target's worker so that its run directory, and its log even on failure, end up in ``out``.

The worker creates the run directory itself (it may replace a previous run there with ``--force``),
so the log is written to a temporary file and copied into ``<out>/logs/`` afterwards. The inputs
are handed over as an ``.npz`` in the same temporary directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import fs
from ..errors import QnnDebugError
from ..progress import NULL_PROGRESS, Progress
from ..runstore import LOG_DIR, Run, load_run
from ..workers import run_worker

if TYPE_CHECKING:
    import numpy as np


def run_capture_worker(module: str, request: dict[str, Any], out: Path, arrays: dict[str, np.ndarray], *,
                       log_name: str, what: str, timeout: float, progress: Progress = NULL_PROGRESS,
                       files: dict[str, bytes] | None = None) -> Run:
    """Start ``module`` with ``request`` plus ``inputs_npz`` (and ``files`` written next to it) and load its run.

    ``files`` maps a request key to bytes to hand over as a file (e.g. a shape-fixed model); the
    request receives the file's path under that key.
    """
    from ..inputs import save_npz

    with fs.scratch("qnn-debug-target-") as tmp:
        full = dict(request, out=str(out), inputs_npz=str(save_npz(Path(tmp) / "inputs.npz", arrays)))
        for key, data in (files or {}).items():
            path = Path(tmp) / key
            path.write_bytes(data)
            full[key] = str(path)
        log = Path(tmp) / log_name
        try:
            run_worker(module, full, log_path=log, timeout=timeout, progress=progress, what=what)
        except QnnDebugError as e:
            kept = _keep_log(log, out)
            if e.hint and str(log) in e.hint:  # the temporary log is about to disappear
                tail = str(e.details.get("log_tail", "")).splitlines()[-1:] or ["(no output)"]
                e.hint = e.hint.replace(str(log), str(kept)) if kept else f"last output: {tail[0]}"
            raise
        _keep_log(log, out)
    return load_run(out)


def _keep_log(log: Path, out: Path) -> Path | None:
    if not (log.exists() and out.is_dir()):
        return None
    (out / LOG_DIR).mkdir(exist_ok=True)
    return Path(shutil.copy2(log, out / LOG_DIR / log.name))
