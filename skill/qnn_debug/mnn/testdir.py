"""MNN test directories: the layout ``tools/script/testMNNFromOnnx.py`` prepares and ``ModuleBasic.out`` reads.

A test dir holds ``input.json`` (``{"inputs": [{"name", "shape"}], "outputs": [names]}``, optionally
``shapeMutable``), one ``<input name>.txt`` per input and one ``<output name>.txt`` per reference output
(flattened, one value per line). ModuleBasic opens ``<dir>/<name>.txt`` literally, so a name with ``/``
lives in a sub-directory (as testMNNFromOnnx writes it) and a name that would leave the directory is
refused. ``shapeMutable`` matters for QNN online runs: without ``"shapeMutable": false`` inputs are not
copied into the QNN graph (the ``Tensor usage is 1.`` / ``error code 6000`` failure).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import fs
from ..errors import BadInputError
from ..runstore import atomic_write_text
from .models import TestDirInfo, ToggleResult

INPUT_JSON = "input.json"
MAX_INPUT_JSON_BYTES = 16 << 20
MAX_TXT_BYTES = 1 << 30
MAX_RANK = 16
MAX_DIM = (1 << 31) - 1
MAX_ELEMENTS = 1 << 31


def data_file(directory: Path, name: str) -> Path:
    """``<dir>/<name>.txt`` as ModuleBasic opens it, refusing names that would leave ``directory``."""
    if not name or "\x00" in name or name.startswith("/") or ".." in name.split("/"):
        raise BadInputError(f"tensor name {name!r} cannot be a test-dir file",
                            hint="ModuleBasic reads <dir>/<name>.txt; rename the tensor or use another test dir")
    path = directory / f"{name}.txt"
    root = directory.resolve()
    if root not in path.resolve().parents:
        raise BadInputError(f"tensor name {name!r} would write outside the test dir", hint="rename the tensor")
    return path


def _load_json(directory: Path) -> tuple[Path, dict[str, Any]]:
    d = Path(directory)
    f = d / INPUT_JSON
    if not d.is_dir():
        raise BadInputError(f"test dir {d} does not exist", hint="pass a directory holding input.json")
    if not f.is_file():
        raise BadInputError(f"{d} is not an MNN test dir (no {INPUT_JSON})",
                            hint="create one with `qnn-debug testdir` or MNN's testMNNFromOnnx.py")
    try:
        doc = fs.read_json(f, what="test-dir input.json", max_bytes=MAX_INPUT_JSON_BYTES)
    except BadInputError as e:
        raise BadInputError(f"{f} is not valid JSON ({e.message})",
                            hint="ModuleBasic would print 'Invalid json'; fix or recreate it") from None
    inputs = doc.get("inputs") if isinstance(doc, dict) else None
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in inputs):
        raise BadInputError(f"{f} is not an MNN test-dir input.json (needs a non-empty \"inputs\" list of {{\"name\": ...}})",
                            hint="create one with `qnn-debug testdir`")
    for i in inputs:
        _check_shape(f, i)
    return f, doc


def _check_shape(f: Path, entry: dict[str, Any]) -> None:
    """An input's ``shape``: a short list of non-negative integers whose product stays allocatable."""
    shape = entry.get("shape", [])
    ok = isinstance(shape, list) and len(shape) <= MAX_RANK and all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in shape)
    count = 1
    for d in shape if ok else []:
        count *= d
    if not ok or count > MAX_ELEMENTS:
        name = str(entry.get("name"))[:100]
        raise BadInputError(f"{f}: input {name!r} has an unusable shape {str(shape)[:100]}",
                            hint=f"give a list of at most {MAX_RANK} integers, e.g. [1, 3, 224, 224]")


def read_testdir(directory: str | os.PathLike[str]) -> TestDirInfo:
    """Parse input.json and list which references exist; refuses directories that are not test dirs."""
    d = Path(directory)
    _, doc = _load_json(d)
    inputs = {i["name"]: [int(s) for s in i.get("shape", [])] for i in doc["inputs"]}
    outputs = [str(o) for o in doc.get("outputs", []) if isinstance(o, str)]
    mutable = doc.get("shapeMutable")
    refs = [o for i, o in enumerate(outputs) if _reference_file(d, o, i) is not None]
    known = {"inputs", "outputs", "shapeMutable"}
    return TestDirInfo(dir=str(d), inputs=inputs, outputs=outputs,
                       shape_mutable=mutable if isinstance(mutable, bool) else None, references=refs,
                       extra_keys={k: v for k, v in doc.items() if k not in known})


def _reference_file(d: Path, name: str, position: int) -> Path | None:
    """ModuleBasic looks for ``<name>.txt`` first, then ``<position>.txt``."""
    for candidate in (name, str(position)):
        try:
            p = data_file(d, candidate)
        except BadInputError:
            continue
        if p.is_file():
            return p
    return None


def load_references(directory: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Reference outputs of a test dir as flat float64 arrays (ModuleBasic reads them as double)."""
    d = Path(directory)
    info = read_testdir(d)
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(info.outputs):
        p = _reference_file(d, name, i)
        if p is not None:
            out[name] = _read_txt(p)
    return out


def load_inputs(directory: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Input arrays of a test dir, shaped as input.json says (float32, as ModuleBasic feeds float models)."""
    d = Path(directory)
    info = read_testdir(d)
    out: dict[str, np.ndarray] = {}
    for name, shape in info.inputs.items():
        p = data_file(d, name)
        if not p.is_file():
            raise BadInputError(f"test dir {d} has no {p.name} for input {name!r}",
                                hint="ModuleBasic would print 'TESTERROR Can't open' and run on garbage")
        flat = _read_txt(p)
        count = int(np.prod(shape)) if shape else flat.size
        if flat.size < count:
            raise BadInputError(f"{p} has {flat.size} values, input {name!r} of shape {shape} needs {count}",
                                hint="regenerate the test dir")
        out[name] = flat[:count].astype(np.float32).reshape(shape if shape else flat.shape)
    return out


def _read_txt(path: Path) -> np.ndarray:
    text = fs.read_text(path, what="test-dir data file", max_bytes=MAX_TXT_BYTES)
    try:
        return np.array(text.split(), dtype=np.float64)
    except (OSError, ValueError) as e:
        raise BadInputError(f"{path} is not a list of numbers ({e})", hint="regenerate the test dir") from None


def toggle_shape_mutable(directory: str | os.PathLike[str], value: bool | None = None) -> ToggleResult:
    """Set (``value``) or flip (``None``) ``shapeMutable`` in a test dir's input.json.

    The file is rewritten atomically and its previous content kept as ``input.json.bak`` (numbered when
    that exists). Setting the value it already has changes nothing, so calling twice is harmless.
    An absent key counts as ModuleBasic's default, true.
    """
    f, doc = _load_json(Path(directory))
    if os.path.islink(f):  # editing through a link would copy its target here and replace the link
        raise BadInputError(f"{f} is a symbolic link; toggle_shapeMutable only edits a real file",
                            hint="replace the link with a copy of the file you mean to edit")
    raw = doc.get("shapeMutable")
    if raw is not None and not isinstance(raw, bool):
        if value is None:
            raise BadInputError(f"{f} has shapeMutable = {raw!r}, not a JSON true/false",
                                hint="pass --value true or --value false to set it explicitly")
        raw = None
    old: bool | None = raw
    effective = True if old is None else old
    new = (not effective) if value is None else value
    if old is not None and old == new:
        return ToggleResult(file=str(f), old=old, new=new, changed=False)
    previous = fs.read_bytes(f, what="test-dir input.json", max_bytes=MAX_INPUT_JSON_BYTES)
    doc["shapeMutable"] = new
    text = fs.strict_json(doc, indent=4)  # refuses NaN/Infinity before anything is written
    backup = _free_backup(f)
    fs.atomic_write_bytes(backup, previous)
    atomic_write_text(f, text)
    return ToggleResult(file=str(f), old=old, new=new, changed=True, backup=str(backup))


toggle_shapeMutable = toggle_shape_mutable  # the name MNN users know the key by


def _free_backup(f: Path) -> Path:
    candidate = f.with_name(f.name + ".bak")
    n = 2
    while os.path.lexists(candidate):
        candidate = f.with_name(f"{f.name}.bak{n}")
        n += 1
    return candidate
