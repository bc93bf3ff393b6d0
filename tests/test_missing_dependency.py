"""A package the engine needs but that is not installed (MNN's wheel is installed apart from the rest) is reported as
``MissingDependencyError`` with the command that installs it, from a worker and from the CLI — never a bare
``ModuleNotFoundError``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from qnn_debug.cli import unexpected
from qnn_debug.errors import MissingDependencyError, error_from_dict, missing_dependency


def _shadow(tmp: Path) -> Path:
    """A folder on PYTHONPATH where ``import MNN`` fails the way it does when the wheel is missing, and a worker
    module that needs MNN."""
    pkg = tmp / "shadow" / "MNN"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'MNN\'", name="MNN")\n')
    (tmp / "shadow" / "needs_mnn_worker.py").write_text("import MNN\n\ndef main(request, progress):\n    return {}\n")
    return tmp / "shadow"


def test_a_worker_without_mnn_answers_with_the_install_command(tmp_path: Path) -> None:
    shadow = _shadow(tmp_path)
    req, resp = tmp_path / "req.json", tmp_path / "resp.json"
    req.write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "qnn_debug.workers.entry", "needs_mnn_worker", str(req), str(resp)],
                          env={"PYTHONPATH": str(shadow), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    err = error_from_dict(json.loads(resp.read_text())["error"])
    assert isinstance(err, MissingDependencyError) and err.kind == "missing_dependency"
    assert "'MNN' is not installed" in err.message and "pip install --no-deps MNN==3.6.1" in (err.hint or "")


def test_the_cli_reports_a_missing_package_it_knows_and_keeps_others_internal() -> None:
    known = unexpected(ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime"))
    assert isinstance(known, MissingDependencyError) and "onnxruntime-qnn" in (known.hint or "")
    other = unexpected(ModuleNotFoundError("No module named 'left_pad'", name="left_pad"))
    assert not isinstance(other, MissingDependencyError) and "internal error" in other.message
    assert missing_dependency(ImportError("cannot import name 'x' from 'MNN'", name="MNN")) is None
