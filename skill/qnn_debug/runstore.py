"""The run store: one directory per run, reloadable, so a comparison never needs a re-run.

Layout of a run directory::

    run.json                 RunRecord (what ran, with what, and every captured tensor)
    tensors/NNNN_<name>.npy  float view of each tensor, in the *model's* layout (NCHW for ONNX/MNN)
    tensors/NNNN_<name>.q.npy  raw integers for quantized tensors (scale/zero-point in run.json)
    logs/                    stdout/stderr of workers and tools, kept for triage

``run.json`` is written last and atomically: a directory without it is an incomplete run and
``load_run`` says so. Tensors are ``.npy`` files so they can be memory-mapped; a 2 GiB run is
compared without ever being held in memory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from . import fs
from .errors import BadInputError, QnnDebugError
from .runstore_models import InputInfo, now_iso

SCHEMA_VERSION = 1
RUN_FILE = "run.json"
TENSOR_DIR = "tensors"
LOG_DIR = "logs"
# A baseline directory's layout: ``qnn_debug.baseline`` writes it; compare, next steps, the MNN capture and
# the test-dir builder read it. The names live here, with the rest of the run store's layout.
BASELINE_FILE = "baseline.json"
INPUTS_FILE = "inputs.npz"  # the exact inputs of every run in the baseline
REFERENCE_DIR, FLOOR_DIR, MNN_DIR = "reference", "fp16_floor", "mnn_cpu"

RunRole = Literal["reference", "fp16_floor", "target", "mnn_cpu", "imported"]
TensorKind = Literal["input", "activation", "output", "stage", "constant"]


class TensorSpec(BaseModel):
    """A model input or output as declared by the model."""

    name: str
    shape: list[int | str | None]
    dtype: str


class ModelInfo(BaseModel):
    path: str
    sha256: str
    format: Literal["onnx", "mnn", "other"]
    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)


class QuantParams(BaseModel):
    """Quantization of the raw integers: ``float = (q + offset) * scale`` (QNN's convention).

    ``zero_point`` follows ONNX's convention (``float = (q - zero_point) * scale``); we store both
    forms explicitly so nobody has to remember a sign. ``axis`` is set for per-channel encodings.
    """

    scale: float | list[float]
    offset: int | list[int]
    axis: int | None = None
    raw_file: str
    raw_dtype: str
    convention: str = "float = (q + offset) * scale"

    @property
    def zero_point(self) -> int | list[int]:
        return [-o for o in self.offset] if isinstance(self.offset, list) else -self.offset


EquivalenceKind = Literal["cast", "layout", "pre_activation", "fused_output"]


class Equivalence(BaseModel):
    """Which model tensor a target-only tensor (a backend stage or copy) holds the values of.

    Written by importers that know the target's graph (the MNN dump reader); ``compare`` aligns such a
    tensor with the reference tensor it stands for instead of listing it as unaligned.
    ``cast``: a backend cast/dequant copy of ``of[0]`` (the value as the target held it). ``layout``: the
    values of ``of`` in another layout (a layout-only op's input or output). ``pre_activation``: an op's
    result before its fused activation, ``of`` being that op's outputs; it stands for the tensor that feeds
    the activation in the source graph. ``fused_output``: a tensor the target names after one model tensor
    but writes with a fused op named after a later model node, whose outputs ``of`` are; it stands for them
    when that node covers the named tensor's producer (``compare.align`` checks it with the model's graph).
    """

    kind: EquivalenceKind
    of: list[str]  # model tensor names, nearest first
    note: str


class TensorRecord(BaseModel):
    """One captured tensor: what it is, who produced it, and where its bytes live."""

    name: str
    file: str
    shape: list[int]
    dtype: str  # dtype of the stored float view
    source_dtype: str  # dtype the target produced (e.g. float16, uint8, int32)
    op: str | None = None  # producing node/op name (None for graph inputs)
    op_type: str | None = None
    position: int = -1  # index of the producing op in execution order; -1 for graph inputs
    kind: TensorKind = "activation"
    label: str | None = None  # e.g. "fp16 cast stage", "internal stage of conv1"
    target_name: str | None = None  # the name the target used (e.g. "t3", "conv1_token_1")
    layout_note: str | None = None  # e.g. "restored NCHW from NHWC 1x32x32x16"
    quant: QuantParams | None = None
    equivalent: Equivalence | None = None  # a stage/copy standing for a model tensor (see Equivalence)


class RunRecord(BaseModel):
    """What ran: model, inputs, target, precision, versions, timing, assignment and all tensors."""

    schema_version: int = SCHEMA_VERSION
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    role: RunRole
    target: str  # "ort-cpu", "fp16-floor", "mnn-cpu", "htp-sim", "device", "host", "npz", "mnn-dump"
    precision: str  # "fp32", "fp16", "quantized", ...
    model: ModelInfo | None = None
    inputs: InputInfo | None = None
    soc_model: int | None = None
    htp_arch: int | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    started_at: str = Field(default_factory=lambda: now_iso())
    finished_at: str | None = None
    assignment: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    observer_effect_db: dict[str, float] | None = None
    outputs: list[str] = Field(default_factory=list)  # names of the model's final outputs
    extra: dict[str, Any] = Field(default_factory=dict)
    tensors: list[TensorRecord] = Field(default_factory=list)


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with fs.open_read(path) as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_arrays(arrays: dict[str, np.ndarray]) -> str:
    """Hash of named arrays (names, dtypes, shapes and bytes), independent of dict order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_file_stem(name: str, limit: int = 80) -> str:
    """A file-name fragment that can never leave the directory or run a command."""
    stem = _UNSAFE.sub("_", name).strip("._") or "tensor"
    return stem[:limit]


def json_safe_name(name: str, limit: int = 4096) -> str:
    """A tensor name as valid, bounded Unicode: lone surrogates (bytes that were not UTF-8, or ``\\ud800`` escapes
    in someone's JSON) become U+FFFD, so every run.json we write is valid JSON text."""
    return _SURROGATE.sub("\ufffd", name)[:limit]


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same (confined) directory and rename, so readers never see half a file."""
    fs.atomic_write_text(path, text)


def check_output_dir(out: Path, *, force: bool, is_ours: Callable[[Path], bool], what: str) -> bool:
    """Refuse ``out`` unless it is absent, empty, or (with ``force``) holds a previous ``what``.

    For result directories made of several runs (a baseline, a demo). Deletes nothing; returns True
    when ``out`` holds a previous result that the caller may now replace.
    """
    if out.exists() and not out.is_dir():
        raise BadInputError(f"output path {out} exists and is not a directory", hint="choose another --out")
    if not (out.exists() and any(out.iterdir())):
        return False
    if not force:
        raise BadInputError(f"output directory {out} is not empty",
                            hint=f"choose a new --out, or pass --force to replace a previous {what} there")
    if not is_ours(out):
        raise BadInputError(f"refusing to replace {out}: it does not look like a qnn-debug {what}", hint="choose a new --out")
    return True


def remove_entries(out: Path, names: Iterable[str]) -> None:
    """Delete the named entries of a previous result in ``out`` (after :func:`check_output_dir` said so),
    and nothing else that lives there."""
    for name in names:
        entry = out / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()


FAILED_FILE = "failed.json"  # a run that failed: what went wrong; its log is in logs/


def keep_failed_log(out_dir: str | os.PathLike[str], name: str, text: str, *, message: str,
                    command: list[str] | None = None) -> Path | None:
    """Keep a failed run's full log at ``<out>/logs/<name>`` (with ``failed.json`` saying what failed), so the
    error can name a file. Only into an absent or empty folder, or over a previous failed attempt; never among
    other files. None when it could not be written (the error is reported either way)."""
    import json

    try:
        path = fs.real_path(out_dir, what="output directory")
        if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not is_failed_attempt(path))):
            return None
        if is_failed_attempt(path):
            remove_entries(path, [FAILED_FILE, LOG_DIR])
        fs.make_dirs(path / LOG_DIR)
        log = path / LOG_DIR / name
        fs.atomic_write_text(log, text, what="run log")
        fs.atomic_write_text(path / FAILED_FILE, json.dumps({"error": message, "log": f"{LOG_DIR}/{name}",
                                                             "command": command or []}, indent=1), what="run log")
        return log
    except (OSError, QnnDebugError):
        return None


def is_failed_attempt(path: Path) -> bool:
    """A folder holding only what :func:`keep_failed_log` wrote (a new run replaces it without ``force``)."""
    return path.is_dir() and (path / FAILED_FILE).is_file() and {p.name for p in path.iterdir()} <= {FAILED_FILE, LOG_DIR}


def prepare_run_dir(out_dir: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Create ``out_dir`` for a new run, refusing to clobber anything that is not a previous run.

    An existing empty directory is fine, and so is a failed attempt's (its log and ``failed.json`` only). With
    ``force``, a previous *run* directory (one holding ``run.json`` or a ``tensors/`` folder) is replaced; any
    other non-empty directory is refused so user data is never deleted.
    """
    path = fs.real_path(out_dir, what="output directory")
    if is_failed_attempt(path):
        remove_entries(path, [FAILED_FILE, LOG_DIR])
    if check_output_dir(path, force=force, is_ours=_is_run_dir, what="run directory"):
        shutil.rmtree(path)
    fs.claim_dir(path)  # a second writer fails here, before any file is written
    fs.make_dirs(path / TENSOR_DIR)
    fs.make_dirs(path / LOG_DIR)
    return path


def _is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).exists() or (path / TENSOR_DIR).is_dir() or fs.is_claimed(path)


class RunWriter:
    """Collects tensors into a run directory; ``finish()`` writes run.json last and atomically."""

    def __init__(self, out_dir: str | os.PathLike[str], record: RunRecord, *, force: bool = False):
        self.dir = prepare_run_dir(out_dir, force=force)
        self.record = record
        self._names: set[str] = set()

    @property
    def log_dir(self) -> Path:
        return self.dir / LOG_DIR

    def add_tensor(
        self,
        name: str,
        array: np.ndarray,
        *,
        op: str | None = None,
        op_type: str | None = None,
        position: int = -1,
        kind: TensorKind = "activation",
        label: str | None = None,
        target_name: str | None = None,
        layout_note: str | None = None,
        source_dtype: str | None = None,
        raw: np.ndarray | None = None,
        scale: float | list[float] | None = None,
        offset: int | list[int] | None = None,
        axis: int | None = None,
        equivalent: Equivalence | None = None,
    ) -> TensorRecord:
        """Store one tensor (float view in model layout) and, for quantized data, its raw integers."""
        name = json_safe_name(name)
        if name in self._names:
            raise ValueError(f"tensor {name!r} added twice to run {self.dir}")
        self._names.add(name)
        index = len(self.record.tensors)
        stem = f"{index:04d}_{safe_file_stem(name)}"
        rel = f"{TENSOR_DIR}/{stem}.npy"
        arr = np.asarray(array)
        with fs.open_new(self.dir / rel, what="tensor file") as f:
            np.save(f, arr, allow_pickle=False)
        quant = None
        if raw is not None:
            if scale is None or offset is None:
                raise ValueError("quantized tensors need scale and offset")
            raw_rel = f"{TENSOR_DIR}/{stem}.q.npy"
            with fs.open_new(self.dir / raw_rel, what="tensor file") as f:
                np.save(f, np.asarray(raw), allow_pickle=False)
            quant = QuantParams(scale=scale, offset=offset, axis=axis, raw_file=raw_rel, raw_dtype=str(raw.dtype))
        rec = TensorRecord(
            name=name,
            file=rel,
            shape=[int(d) for d in arr.shape],
            dtype=str(arr.dtype),
            source_dtype=source_dtype or (str(raw.dtype) if raw is not None else str(arr.dtype)),
            op=op,
            op_type=op_type,
            position=position,
            kind=kind,
            label=label,
            target_name=target_name,
            layout_note=layout_note,
            quant=quant,
            equivalent=equivalent,
        )
        self.record.tensors.append(rec)
        return rec

    def write_log(self, name: str, text: str) -> Path:
        path = self.log_dir / safe_file_stem(name)
        atomic_write_text(path, text)
        return path

    def finish(self) -> Run:
        self.record.finished_at = now_iso()
        atomic_write_text(self.dir / RUN_FILE, self.record.model_dump_json(indent=1))
        fs.release_dir(self.dir)
        return Run(self.dir, self.record)


class Run:
    """A finished run loaded from disk. Tensor data is memory-mapped on access, never preloaded."""

    def __init__(self, path: Path, record: RunRecord):
        self.dir = path
        self.record = record
        self._by_name = {t.name: t for t in record.tensors}

    @property
    def tensors(self) -> list[TensorRecord]:
        return self.record.tensors

    def names(self) -> list[str]:
        return [t.name for t in self.record.tensors]

    def has(self, name: str) -> bool:
        return name in self._by_name

    def info(self, name: str) -> TensorRecord:
        try:
            return self._by_name[name]
        except KeyError:
            raise BadInputError(f"run {self.dir} has no tensor named {name!r}") from None

    def array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        """The float view of a tensor (model layout), memory-mapped by default."""
        return self._load(self.info(name).file, mmap)

    def raw(self, name: str, *, mmap: bool = True) -> np.ndarray | None:
        """The raw integers of a quantized tensor, or None for float tensors."""
        q = self.info(name).quant
        return None if q is None else self._load(q.raw_file, mmap)

    def _load(self, rel: str, mmap: bool) -> np.ndarray:
        path = (self.dir / rel).resolve()
        if self.dir.resolve() not in path.parents:
            raise BadInputError(f"run {self.dir} points outside itself ({rel})", hint="the run.json was edited or corrupted")
        if not path.exists():
            raise BadInputError(f"tensor file {rel} of run {self.dir} is missing", hint="re-run the capture")
        fd = open_tensor_fd(path)
        try:
            proc = f"/proc/self/fd/{fd}"  # numpy reopens exactly the file checked, not whatever the path is by now
            arr = np.load(proc if os.path.exists(proc) else path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise BadInputError(f"tensor file {path} is corrupt: {_one_line(e)}", hint=TENSOR_HINT) from None
        finally:
            os.close(fd)
        check_tensor_dtype(arr.dtype, path)
        return arr

    def iter_in_order(self) -> Iterator[TensorRecord]:
        """Tensors sorted by execution position (graph inputs first), stable for equal positions."""
        return iter(sorted(self.record.tensors, key=lambda t: t.position))


def _one_line(e: BaseException, limit: int = 200) -> str:
    """An exception's text, one line and bounded (it may quote file bytes)."""
    return " ".join(str(e).split())[:limit]


TENSOR_HINT = ("a run's tensor files are the .npy files qnn-debug wrote: re-run the capture (or the baseline) into a new "
               "--out folder")
_NUMERIC_KINDS = "biuf"  # bool, signed and unsigned integers, floats


def open_tensor_fd(path: str | os.PathLike[str]) -> int:
    """A descriptor of a run's tensor file, through ``fs`` (confined; a FIFO, device or directory is refused at open,
    never waited on), with an error that says which tensor file and what to do."""
    try:
        return fs.open_fd(path, what="tensor file")
    except BadInputError as e:
        raise BadInputError(e.message, hint=TENSOR_HINT) from None


def check_tensor_dtype(dtype: np.dtype, path: str | os.PathLike[str]) -> None:
    """Refuse a tensor file that holds strings, objects or other non-numbers (no comparison can read them)."""
    if dtype.kind not in _NUMERIC_KINDS:
        raise BadInputError(f"tensor file {os.fspath(path)} holds {dtype} values ({_KIND_NAMES.get(dtype.kind, 'not numbers')}), "
                            "not numbers", hint=TENSOR_HINT)


_KIND_NAMES = {"U": "strings", "S": "bytes", "O": "objects", "V": "raw records", "c": "complex numbers",
               "M": "dates", "m": "time spans"}


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a run directory (or its run.json); clear errors for missing, incomplete or foreign dirs."""
    p = fs.check(path, what="run directory", must_exist=False)
    if p.is_file() and p.name == RUN_FILE:
        p = p.parent
    if not p.exists():
        raise BadInputError(f"run directory {p} does not exist", hint="pass a directory written by qnn-debug")
    run_file = p / RUN_FILE
    if not run_file.exists():
        if (p / TENSOR_DIR).is_dir():
            raise BadInputError(f"run {p} did not finish (no {RUN_FILE})", hint="re-run the capture")
        raise BadInputError(f"{p} is not a qnn-debug run (no {RUN_FILE})", hint="pass a directory written by qnn-debug")
    data = fs.read_json(run_file, what="run record")
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise BadInputError(
            f"{run_file} has schema_version {version!r}, this tool reads {SCHEMA_VERSION}",
            hint="re-run the capture with this version of qnn-debug",
        )
    try:
        record = RunRecord.model_validate(data)
    except ValidationError as e:
        raise BadInputError(f"{run_file} is not a valid run record: {e.errors()[0]['msg']}", hint="re-run the capture") from None
    return Run(p, record)


def baseline_reference(path: str | os.PathLike[str]) -> Run:
    """The reference run of a baseline directory, for code below the baseline stage (targets, MNN capture);
    the whole baseline with its gate report is ``qnn_debug.baseline.load_baseline``."""
    p = Path(path)
    if p.is_file() and p.name == BASELINE_FILE:
        p = p.parent
    if not (p / BASELINE_FILE).is_file():
        raise BadInputError(f"{p} is not a baseline directory (no {BASELINE_FILE})",
                            hint="pass the --out directory of `qnn-debug baseline`; it may not have finished")
    return load_run(p / REFERENCE_DIR)
