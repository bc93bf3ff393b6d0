"""A third-party client against our real stdio server: the MCP Inspector CLI 2.12.0 (Node).

It lists the tools and calls ``triage_log`` and ``compare``. ``compare`` gets a tiny real pair: the
reference and fp16-floor runs of a baseline the engine builds from ``small_cnn`` in this test.
Exit status 0 means the call succeeded and the result was not ``isError``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_mcp_support import write_small_cnn

pytestmark = pytest.mark.network
INSPECTOR = ["npx", "-y", "@modelcontextprotocol/inspector@2.12.0", "--cli"]


def inspect(root: Path, *method_args: str) -> dict[str, Any]:
    """Run the Inspector against ``python -m qnn_debug_mcp --root ROOT`` and return its JSON answer."""
    cmd = [*INSPECTOR, sys.executable, "-m", "qnn_debug_mcp", "--root", str(root), "--",
           *method_args, "--format", "json", "-q"]
    env = {**os.environ, "npm_config_update_notifier": "false"}
    ran = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert ran.returncode == 0, f"inspector exit {ran.returncode}: {ran.stderr[-2000:]} {ran.stdout[-2000:]}"
    answer: dict[str, Any] = json.loads(ran.stdout)
    return answer


def test_inspector_lists_tools_and_calls_triage_and_compare(tmp_path: Path) -> None:
    listed = inspect(tmp_path, "--method", "tools/list")
    names = {t["name"] for t in listed["result"]["tools"]}
    assert {"triage_log", "compare", "baseline", "job_status"} <= names

    log = "MNN_QNN: Failed to open QNN libs.\nError in file QNNBackend.cpp, line 2009: error code 1002\n"
    triaged = inspect(tmp_path, "--method", "tools/call", "--tool-name", "triage_log",
                      "--tool-args-json", json.dumps({"log_text": log}))
    triaged = triaged["result"]
    assert triaged["isError"] is False
    assert triaged["structuredContent"]["category"] and triaged["structuredContent"]["evidence"]

    model = write_small_cnn(tmp_path)
    base = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "qnn_debug", "baseline", str(model), "--out", str(base), "--no-mnn-gate",
                    "--json"], check=True, capture_output=True, timeout=300)
    compared = inspect(tmp_path, "--method", "tools/call", "--tool-name", "compare", "--tool-args-json",
                       json.dumps({"reference": "base/reference", "target": "base/fp16_floor"}))
    compared = compared["result"]
    assert compared["isError"] is False, compared
    result = compared["structuredContent"]["result"]
    assert result["verdict"]["kind"] in ("ok", "precision")
