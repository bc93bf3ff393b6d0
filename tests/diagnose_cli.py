"""``qnn-debug diagnose`` through the CLI on a model and inputs written into a folder, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from typer.testing import CliRunner

from qnn_debug.cli import app


def diagnose_cli(folder: Path, name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Save ``name``.onnx and its inputs in ``folder``, diagnose them into ``folder/name`` (MNN gate off) and
    return the JSON result."""
    onnx.save(model, str(folder / f"{name}.onnx"))
    np.savez(folder / f"{name}_in.npz", **inputs)
    res = CliRunner().invoke(app, ["diagnose", str(folder / f"{name}.onnx"), "--inputs", str(folder / f"{name}_in.npz"),
                                   "--out", str(folder / name), "--no-mnn-gate", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)
