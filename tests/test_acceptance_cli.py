"""Acceptance findings on the CLI, through the installed `qnn-debug` entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = Path(sys.executable).parent / "qnn-debug"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_not_registered_without_op_name_is_decoded() -> None:
    # Users (and our own SKILL.md) quote the line as "Not registered type 17"; older MNN builds and
    # hand-copied logs drop the ", <op name>." tail. It must still be recognised and decoded.
    log = "Use extra forward type: 5\nMNN_QNN: Not registered type 17\nNot registered type 17\n"
    proc = run("triage", "-", "--json", stdin=log)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["category"] == "unsupported_op_not_registered", doc["category"]
    assert any("Deconvolution" in f for f in doc["facts"]), doc["facts"]
    assert any(s["tool"] == "lookup_op_constraints" for s in doc["next_steps"])


def test_run_help_shows_the_default_run_directory() -> None:
    # "[default: ...]" inside a help string is eaten by rich markup and left "Run directory ."
    proc = run("run", "--help")
    assert proc.returncode == 0
    assert "qnn-debug-runs" in proc.stdout and "Run directory ." not in proc.stdout


def test_probe_with_too_few_shapes_says_which_inputs_are_missing() -> None:
    # Conv needs X and W; one --shape used to end in an ONNX builder error ("Field 'shape' of 'type' is
    # required but missing") reported as a rejection.
    proc = run("op", "Conv", "--probe", "--shape", "1x3x8x8", "--json")
    assert proc.returncode == 2, proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["error"] == "bad_input" and "at least 2 input(s) (X, W)" in doc["message"] and doc["hint"]
