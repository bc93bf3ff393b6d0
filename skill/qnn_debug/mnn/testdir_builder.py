"""Write MNN test directories (the layout :mod:`qnn_debug.mnn.testdir` reads and ``ModuleBasic.out`` runs).

Kept apart from the reader so that reading a test dir (which ``inputs`` does for every ``--inputs DIR``)
never pulls in what builds one. A test dir from a baseline is made one level up, in ``device_ops``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInputError
from ..runstore import atomic_write_text
from .testdir import INPUT_JSON, TestDirInfo, data_file, read_testdir


def write_testdir(
    out: str | os.PathLike[str],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    *,
    references: dict[str, np.ndarray] | None = None,
    shape_mutable: bool | None = None,
    force: bool = False,
) -> TestDirInfo:
    """Write a test dir: input.json, ``<input>.txt`` and (when given) ``<output>.txt`` references."""
    d = Path(out)
    if d.exists() and any(d.iterdir()):
        if not force:
            raise BadInputError(f"test dir {d} is not empty", hint="choose a new directory or pass --force")
        if not (d / INPUT_JSON).is_file():
            raise BadInputError(f"refusing to replace {d}: it is not an MNN test dir (no {INPUT_JSON})",
                                hint="choose a new directory")
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    if not inputs:
        raise BadInputError("a test dir needs at least one input", hint="pass the model's inputs")
    doc: dict[str, Any] = {
        "inputs": [{"name": n, "shape": [int(s) for s in a.shape]} for n, a in inputs.items()],
        "outputs": list(outputs),
    }
    if shape_mutable is not None:
        doc["shapeMutable"] = shape_mutable
    for name, arr in inputs.items():
        _save_txt(data_file(d, name), arr)
    for name, arr in (references or {}).items():
        _save_txt(data_file(d, name), arr)
    atomic_write_text(d / INPUT_JSON, json.dumps(doc, indent=4))
    return read_testdir(d)


def _save_txt(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    flat = np.asarray(arr).reshape(-1)
    if flat.dtype.kind in "iub":
        text = "\n".join(str(int(v)) for v in flat)
    else:
        text = "\n".join(repr(float(v)) for v in flat.astype(np.float64))
    atomic_write_text(path, text + "\n")
