"""Read MNN's QNN intermediate-tensor dumps (``manifest_NNNNNN.tsv`` + ``.raw``) into the run store.

What MNN writes (``QNNTensorDumper``): per graph execution N a manifest ``manifest_%06d.tsv`` with the
header ``index name file data_type dimensions quant_encoding scale offset`` and one headerless raw file per
dumped tensor, in QNN dtype and QNN layout. Facts this module encodes:

- names are ``t<N>`` (entry N of the *source* ``.mnn``'s tensor-name table), ``t<N>_cast`` /
  ``t<N>_dequant`` (fp16 or dequant stages of model inputs/outputs) or ``<node>_<Stage>`` (an op's
  internal stage, node = op name with ``. / :`` replaced by ``_``);
- MNN NC4HW4 tensors are declared channel-last in QNN (``[d0, d2, …, d1]``), so they are transposed
  back to the model's layout;
- quantized tensors (SCALE_OFFSET) dequantize as ``f = (q + offset) * scale`` (QNN's sign);
- cast/dequant stages, ConvertTensor copies and pre-activation stages hold the values of a model tensor;
  each imported tensor records which (``TensorRecord.equivalent``, see :mod:`.equivalence`), and such
  tensors are brought to the layout of the tensor they stand for;
- MNN never clears the dump directory and restarts numbering at 0 each run, so files of an older,
  longer run linger: they are detected by content (raw files of execution 0 the latest manifest does not
  list, later manifests listing exactly those tensors, file names whose execution/tensor numbers disagree
  with their manifest and row) as well as by timestamps, and reported as explicit unaligned rows
  (``extra["unaligned"]``) or refused, never silently read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError
from ..htp_fp16 import HTP_FP16_MAX, Fp16Codes, decode_fp16
from ..progress import NULL_PROGRESS, Progress
from ..runstore import (
    Equivalence,
    InputInfo,
    ModelInfo,
    Run,
    RunRecord,
    RunWriter,
    TensorKind,
    TensorSpec,
    sha256_file,
)
from . import equivalence
from .model_reader import MnnModel, MnnOp, read_mnn_model
from .qnn_types import ENC_SCALE_OFFSET, data_type, encoding_name

MANIFEST_HEADER = ["index", "name", "file", "data_type", "dimensions", "quant_encoding", "scale", "offset"]
_MANIFEST_RE = re.compile(r"^manifest_(\d{6,})\.tsv$")
_RAW_RE = re.compile(r"^execution_(\d{6,})_tensor_(\d{4,})_.*\.raw$")
_T_RE = re.compile(r"^t(\d+)(?:_(cast|dequant))?$")
DUMP_SUBDIR = "qnn_intermediate_outputs"
MAX_MANIFEST_BYTES = 64 << 20
MAX_RANK = 16
MAX_DIM = (1 << 31) - 1
MAX_ELEMENTS = 1 << 32
MAX_LISTED_PROBLEMS = 8
STALE_TOLERANCE_NS = 1_000_000_000


class DumpEntry(BaseModel):
    """One manifest row, as MNN printed it."""

    index: int
    name: str
    file: str
    data_type: int
    dims: list[int]
    quant_encoding: int
    scale: float
    offset: int
    line: int


class DumpExecution(BaseModel):
    """One graph execution: its manifest and rows."""

    number: int
    manifest: str
    mtime_ns: int
    entries: list[DumpEntry]
    stale: bool = False  # left over from an older run (see scan_dump_dir)
    malformed: list[str] = Field(default_factory=list)  # rows that could not be parsed ("<manifest> row N: ...")


class DumpDirectory(BaseModel):
    """A scanned dump directory: executions (oldest number first), stray files, problems found."""

    path: str
    executions: list[DumpExecution]
    unlisted_files: list[str] = Field(default_factory=list)  # raw files in no manifest of this run
    problems: list[str] = Field(default_factory=list)

    def execution(self, number: int | None = None) -> DumpExecution:
        """The chosen execution; default the newest of the most recent run."""
        current = [e for e in self.executions if not e.stale]
        if number is None:
            return (current or self.executions)[-1]
        for e in self.executions:
            if e.number == number:
                return e
        have = ", ".join(str(e.number) for e in self.executions)
        raise BadInputError(f"dump {self.path} has no execution {number}", hint=f"choose one of: {have}")


# --- scanning ----------------------------------------------------------------------------------------------


def find_dump_dir(path: str | os.PathLike[str]) -> Path:
    """Accept the dump dir itself or a directory holding ``qnn_intermediate_outputs/``."""
    p = fs.check(path, what="dump directory", must_exist=False)
    if not p.is_dir():
        raise BadInputError(f"dump directory {p} does not exist", hint="pass the qnn_intermediate_outputs directory")
    if not any(_MANIFEST_RE.match(f.name) for f in p.iterdir()) and (p / DUMP_SUBDIR).is_dir():
        return p / DUMP_SUBDIR
    return p


def scan_dump_dir(path: str | os.PathLike[str]) -> DumpDirectory:
    """Parse every manifest in a dump directory and find stale or stray files."""
    p = find_dump_dir(path)
    manifests = sorted(
        ((int(m.group(1)), f) for f in p.iterdir() if (m := _MANIFEST_RE.match(f.name)) and f.is_file()),
    )
    if not manifests:
        raise BadInputError(
            f"{p} holds no QNN dump manifest (manifest_NNNNNN.tsv)",
            hint="dumps come from an MNN2QNNModel --dump_intermediate_outputs model or an online run with "
            "MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS; check MNN_QNN_DUMP_DIR and the run's log",
        )
    problems: list[str] = []
    executions = [_read_manifest(f, number, problems) for number, f in manifests]
    _mark_stale(executions, problems)
    _mark_stale_by_content(executions, {f.name for f in p.iterdir() if _RAW_RE.match(f.name)}, problems)
    listed = {(e.number, r.file) for e in executions if not e.stale for r in e.entries}
    current_numbers = {e.number for e in executions if not e.stale}
    unlisted = []
    for f in sorted(p.iterdir()):
        m = _RAW_RE.match(f.name)
        if m and (int(m.group(1)), f.name) not in listed:
            unlisted.append(f.name)
            if int(m.group(1)) in current_numbers:
                problems.append(f"{f.name} is in no manifest of the latest run: left over from an older run")
    if any(e.stale for e in executions):
        stale = [e.manifest for e in executions if e.stale]
        problems.append(
            f"{', '.join(stale)} predate(s) the latest run (MNN never clears the dump directory); "
            "clear the directory before each run"
        )
    return DumpDirectory(path=str(p), executions=executions, unlisted_files=unlisted, problems=problems)


def _read_manifest(path: Path, number: int, problems: list[str]) -> DumpExecution:
    text = fs.read_text(path, what="dump manifest", max_bytes=MAX_MANIFEST_BYTES, errors="surrogateescape")
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r").split("\t") != MANIFEST_HEADER:
        raise BadInputError(
            f"{path} is not an MNN QNN dump manifest (unexpected header {lines[0][:80]!r})",
            hint="expected the tab-separated header: " + " ".join(MANIFEST_HEADER),
        )
    entries: list[DumpEntry] = []
    malformed: list[str] = []
    for lineno, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line:
            continue
        entry = _parse_row(line, lineno)
        if entry is None:
            problems.append(f"{path.name}:{lineno}: malformed row {json_safe(line[:120])!r} (skipped)")
            malformed.append(f"{path.name} row {lineno}: malformed row {json_safe(line[:120])!r}")
            continue
        entries.append(entry)
    return DumpExecution(number=number, manifest=path.name, mtime_ns=path.stat().st_mtime_ns, entries=entries,
                         malformed=malformed)


def _parse_row(line: str, lineno: int) -> DumpEntry | None:
    """8 tab-separated fields; a name containing a tab (never escaped by MNN) is re-joined."""
    fields = line.split("\t")
    if len(fields) < 8:
        return None
    name = "\t".join(fields[1:-6])
    file, dtype, dims, enc, scale, offset = fields[-6:]
    try:
        return DumpEntry(
            index=int(fields[0]),
            name=json_safe(name),
            file=file,
            data_type=int(dtype),
            dims=[int(d) for d in dims.split("x")] if dims else [],
            quant_encoding=int(enc),
            scale=float(scale),
            offset=int(offset),
            line=lineno,
        )
    except ValueError:
        return None


def _mark_stale(executions: list[DumpExecution], problems: list[str]) -> None:
    """A run writes manifests 0, 1, 2, … in time order; one clearly older than its predecessor is left over.

    The tolerance keeps a copy without preserved timestamps (``cp`` without ``-p``; we pull with
    ``adb pull -a``), which stamps files in arbitrary order within moments, from looking stale.
    """
    for i in range(1, len(executions)):
        prev, cur = executions[i - 1], executions[i]
        older = prev.mtime_ns - cur.mtime_ns
        if prev.stale or cur.number != prev.number + 1 or older > STALE_TOLERANCE_NS:
            cur.stale = True
            if not prev.stale:
                why = (f"{older / 1e9:.1f} s older than {prev.manifest}" if older > STALE_TOLERANCE_NS
                       else f"numbering jumps from {prev.number}")
                problems.append(f"{cur.manifest} is {why}")
    if executions and executions[0].number != 0:
        problems.append(f"no manifest_000000.tsv: the dump starts at {executions[0].manifest}; "
                        "files are missing or belong to another run")


def _mark_stale_by_content(executions: list[DumpExecution], raw_files: set[str], problems: list[str]) -> None:
    """Find executions of an earlier, longer run from the files themselves, not their timestamps.

    MNN restarts numbering at 0 and overwrites only the files it writes, so an earlier run with more
    tensors leaves raw files of execution 0 that the latest ``manifest_000000.tsv`` does not list. A later
    manifest listing exactly such a tensor (same index and name) was written by that earlier run: it is
    stale even when a copy without timestamps made the mtimes useless.
    """
    current = [e for e in executions if not e.stale]
    if not current:
        return
    first = current[0]
    listed = {r.file for r in first.entries}
    leftovers = {f for f in raw_files if f.startswith(f"execution_{first.number:06d}_") and f not in listed}
    if not leftovers:
        return
    for e in current[1:]:
        prefix = f"execution_{e.number:06d}_"
        hit = next((r for r in e.entries if r.file.startswith(prefix)
                    and f"execution_{first.number:06d}_" + r.file[len(prefix):] in leftovers), None)
        if hit is not None:
            e.stale = True
            problems.append(f"{e.manifest} lists tensor {hit.name!r} (row {hit.line}) that {first.manifest} of the "
                            "latest run does not, while its execution-0 file is still present: left over from an "
                            "earlier, longer run")
    stale = [i for i, e in enumerate(executions) if e.stale]
    for i in range(min(stale, default=len(executions)), len(executions)):  # numbering is contiguous per run
        executions[i].stale = True


def unaligned_files(scan: DumpDirectory, chosen: DumpExecution) -> list[dict[str, str]]:
    """Raw files numbered like the chosen execution that its manifest does not list, each with the reason:
    reported as explicit unaligned rows, never read."""
    prefix = f"execution_{chosen.number:06d}_"
    listed = {r.file for r in chosen.entries}
    return [{"file": f, "reason": f"present in the dump folder but not listed in {chosen.manifest}: left over from "
             "an earlier, longer run (not read)"} for f in scan.unlisted_files if f.startswith(prefix) and f not in listed]


# --- decoding ----------------------------------------------------------------------------------------------


class DecodedTensor(BaseModel, arbitrary_types_allowed=True):
    """A raw file decoded in QNN layout: float view, and raw integers for quantized tensors."""

    entry: DumpEntry
    values: np.ndarray
    raw: np.ndarray | None = None
    note: str | None = None
    fp16_extended: int = 0  # HTP fp16 codes with exponent field 31, read as finite values
    fp16_saturated: int = 0  # ... of which at HTP's rail (±131008)


def read_entry(dump_dir: str | os.PathLike[str], entry: DumpEntry, *, fp16_codes: Fp16Codes = "htp") -> DecodedTensor:
    """Decode one manifest row's raw file (QNN layout, little-endian), dequantizing SCALE_OFFSET data.

    FLOAT_16 buffers are HTP's by default: exponent-31 codes are finite (up to 131008), never inf/NaN
    (``fp16_codes="ieee"`` for a producer with IEEE semantics)."""
    base = Path(dump_dir)
    if not entry.file or "/" in entry.file or "\\" in entry.file or entry.file in (".", ".."):
        raise BadInputError(f"manifest row {entry.line} names an unsafe file {entry.file!r}",
                            hint="the manifest was edited or corrupted")
    path = base / entry.file
    dt = data_type(entry.data_type)
    if dt is None or dt.numpy is None:
        name = dt.name if dt else f"code {entry.data_type}"
        raise BadInputError(f"tensor {entry.name!r} has QNN data type {name}, which has no host representation",
                            hint="MNN never dumps this type; the manifest may be from another tool")
    np_dtype = np.dtype(dt.numpy).newbyteorder("<")
    count = element_count(entry)
    expected = count * np_dtype.itemsize
    check_dims(entry)
    if not os.path.lexists(path):
        raise BadInputError(f"raw file {entry.file} of tensor {entry.name!r} is missing",
                            hint="the dump was copied incompletely; pull the whole directory again")
    with fs.open_read(path, what=f"raw file of manifest row {entry.line}") as f:
        size = os.fstat(f.fileno()).st_size
        if size != expected:
            raise BadInputError(
                f"raw file {entry.file} has {size} bytes, expected {expected} for {dt.name} {entry.dims}",
                hint="the dump is truncated or belongs to another run; re-run with a cleared dump directory",
            )
        data = np.fromfile(f, dtype=np_dtype, count=count).reshape(entry.dims)
    if dt.numpy == "float16":
        half = decode_fp16(data, fp16_codes)
        note = None
        if half.extended:
            note = (f"{half.extended} HTP fp16 value(s) beyond ±65504 read as finite (exponent field 31), "
                    f"{half.saturated} at the ±{HTP_FP16_MAX:g} saturation rail")
        return DecodedTensor(entry=entry, values=half.values, note=note, fp16_extended=half.extended,
                             fp16_saturated=half.saturated)
    if dt.is_float:
        return DecodedTensor(entry=entry, values=data.astype(np.float64 if dt.numpy == "float64" else np.float32))
    if dt.fixed_point:
        if entry.quant_encoding == ENC_SCALE_OFFSET and entry.scale != 0:
            values = ((data.astype(np.float64) + entry.offset) * entry.scale).astype(np.float32)
            return DecodedTensor(entry=entry, values=values, raw=data)
        note = (f"{dt.name} with {encoding_name(entry.quant_encoding)} encoding: the manifest carries no usable "
                "scale/offset, values are the raw integers (not dequantized)")
        return DecodedTensor(entry=entry, values=data, note=note)
    return DecodedTensor(entry=entry, values=data)


# --- naming and layout -------------------------------------------------------------------------------------


class _Placement(BaseModel):
    """Where a dumped tensor belongs in the model."""

    name: str
    kind: TensorKind
    op: MnnOp | None = None
    position: int = -1
    order: float = 0.0  # sort key inside one position
    label: str | None = None
    layout_of: int | None = None  # tensor index whose data format applies
    reference_name: str | None = None  # model tensor name whose shape applies
    equivalent: Equivalence | None = None  # the model tensor(s) this one holds the values of

    def shape_names(self) -> list[str]:
        """Model tensors whose model-layout shape this tensor has, best first."""
        return [self.reference_name or self.name, *(self.equivalent.of if self.equivalent else [])]


def _place(entry: DumpEntry, model: MnnModel | None) -> _Placement:
    if model is None:
        return _Placement(name=entry.name or f"unnamed_{entry.index}", kind="activation", position=entry.index,
                          label="no .mnn given: QNN name kept")
    m = _T_RE.match(entry.name)
    if m:
        idx = int(m.group(1))
        stage = m.group(2)
        tname = model.tensor_name(idx)
        if tname is None:
            return _Placement(name=entry.name, kind="stage", position=len(model.ops),
                              label=f"t{idx} is not in the model's tensor table ({len(model.tensor_names)} tensors)")
        op = model.producer(idx)
        is_input = any(i.index == idx for i in model.inputs)
        position = -1 if is_input or op is None else op.position
        if stage is None:
            kind: TensorKind = "input" if is_input else "output" if tname in model.output_names else "activation"
            return _Placement(name=tname, kind=kind, op=None if is_input else op, position=position, order=0.5,
                              layout_of=idx, reference_name=tname, equivalent=equivalence.of_tensor(model, idx))
        dt = data_type(entry.data_type)
        # a quantized output's pre-Dequantize tensor is also called t<N>_cast in fp16 mode (onAcquire order)
        converter = "Dequantize" if stage == "dequant" or (dt is not None and dt.fixed_point) else "Cast"
        label = (f"fp16 copy of input {tname} (backend Cast)" if is_input and stage == "cast"
                 else f"{tname} before the backend's fp32 {converter}" if tname in model.output_names
                 else f"{stage} stage of {tname}")
        return _Placement(name=f"{tname}@{stage}", kind="stage", op=None if is_input else op, position=position,
                          order=1.0 if is_input else 0.0, label=label, layout_of=idx, reference_name=tname,
                          equivalent=equivalence.of_cast(model, idx, stage))
    op, stage_name = _stage_op(entry.name, model)
    if op is not None:
        return _Placement(name=f"{op.name}@{stage_name}", kind="stage", op=op, position=op.position, order=0.25,
                          label=f"internal stage {stage_name} of op {op.name} ({op.type_name})",
                          layout_of=op.outputs[0] if op.outputs else None,
                          equivalent=equivalence.of_stage(model, op, stage_name))
    return _Placement(name=entry.name or f"unnamed_{entry.index}", kind="stage", position=len(model.ops),
                      label="backend tensor not traceable to an op of the model")


def _stage_op(name: str, model: MnnModel) -> tuple[MnnOp | None, str]:
    """``<node>_<Stage>``: the longest op node name that prefixes the tensor name."""
    parts = name.split("_")
    for cut in range(len(parts) - 1, 0, -1):
        op = model.op_by_node_name("_".join(parts[:cut]))
        if op is not None:
            return op, "_".join(parts[cut:])
    return None, ""


def _channel_last(shape: Sequence[int]) -> list[int]:
    return [shape[0], *shape[2:], shape[1]] if len(shape) >= 3 else list(shape)


def _to_model_layout(values: np.ndarray) -> np.ndarray:
    n = values.ndim
    return np.ascontiguousarray(np.transpose(values, (0, n - 1, *range(1, n - 1))))


class _Layout(BaseModel):
    transpose: bool  # channel-last QNN dims → model layout
    note: str
    warning: str | None = None


def _layout(dims: list[int], place: _Placement, model: MnnModel | None, shapes: Mapping[str, Sequence[int]]) -> _Layout:
    """Decide whether a dumped tensor is channel-last: by the model's shape when known, else by MNN's format."""
    fmt = model.tensor_format(place.layout_of) if model is not None and place.layout_of is not None else "UNKNOWN"
    channel_last = fmt == "NC4HW4" and len(dims) >= 3
    restored = f"restored NCHW from NHWC {_x(dims)}"
    want = next((shapes[n] for n in place.shape_names() if n in shapes), None)
    if want is not None:
        want = list(want)
        fits_as_is = dims == want
        fits_permuted = len(dims) >= 3 and dims == _channel_last(want)
        if fits_as_is and fits_permuted:  # e.g. C == H == W: the model's data format decides
            return _Layout(transpose=channel_last, note=f"{restored if channel_last else f'model layout {_x(dims)}'} "
                           f"(shape ambiguous; MNN format {fmt})")
        if fits_as_is:
            return _Layout(transpose=False, note=f"model layout {_x(dims)}")
        if fits_permuted:
            return _Layout(transpose=True, note=restored)
        warning = f"{place.name}: QNN dims {_x(dims)} match neither model shape {_x(want)} nor its channel-last form"
        return _Layout(transpose=channel_last, note=f"{restored} (MNN format NC4HW4)" if channel_last
                       else f"QNN dims {_x(dims)} kept", warning=warning)
    if channel_last:
        return _Layout(transpose=True, note=f"{restored} (MNN format NC4HW4)")
    if model is None:
        return _Layout(transpose=False, note=f"QNN layout {_x(dims)} (model layout unknown without the .mnn)")
    return _Layout(transpose=False, note=f"model layout {_x(dims)} (MNN format {fmt})")


def _x(dims: Sequence[int]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


# --- import ------------------------------------------------------------------------------------------------


def import_mnn_dump(
    dump_dir: str | os.PathLike[str],
    *,
    mnn_model: str | os.PathLike[str] | MnnModel | None = None,
    execution: int | None = None,
    out: str | os.PathLike[str],
    force: bool = False,
    shapes: Mapping[str, Sequence[int]] | None = None,
    input_info: InputInfo | None = None,
    target: str = "mnn-dump",
    soc_model: int | None = None,
    htp_arch: int | None = None,
    warnings: Sequence[str] = (),
    extra: Mapping[str, object] | None = None,
    input_arrays: Mapping[str, np.ndarray] | None = None,
    fp16_codes: Fp16Codes = "htp",
    progress: Progress = NULL_PROGRESS,
) -> Run:
    """Import one execution of an MNN QNN dump directory into a run directory ``out``.

    ``mnn_model`` is the *source* ``.mnn`` (the one given to MNN2QNNModel, or run online): it turns ``t<N>``
    into tensor names, names the producing ops and says which tensors were channel-last. ``shapes`` (model
    tensor name → model-layout shape, e.g. from a reference run) makes the layout decision exact.
    ``input_arrays`` (the data the run was fed) are stored as graph inputs, which QNN never dumps.
    ``fp16_codes`` says how FLOAT_16 buffers encode exponent-31 codes (HTP: finite; see :mod:`qnn_debug.htp_fp16`);
    the run records how many values were read beyond ±65504 (``extra["htp_fp16"]``).
    """
    scan = scan_dump_dir(dump_dir)
    chosen = scan.execution(execution)
    refuse_damaged(scan, chosen)  # before anything is written: no run, and so no verdict, from a damaged dump
    model = _load_model(mnn_model)
    shapes = dict(shapes or {})
    if model is not None:
        for inp in model.inputs:
            if inp.name not in shapes and all(d > 0 for d in inp.shape) and inp.data_format in ("NCHW", "NC4HW4"):
                shapes[inp.name] = inp.shape
    run_warnings = list(warnings) + list(scan.problems)
    if chosen.stale:
        run_warnings.append(f"execution {chosen.number} ({chosen.manifest}) is left over from an older run")
    if model is None:
        run_warnings.append("no .mnn given: tensors keep their QNN names (t<N>) and QNN layout")
    placed = sorted(((_place(e, model), e) for e in chosen.entries), key=lambda pe: (pe[0].position, pe[0].order, pe[1].index))
    dtypes = {e.data_type for e in chosen.entries}
    record = RunRecord(
        role="target",
        target=target,
        precision=_precision(dtypes),
        model=model_info(model),
        inputs=input_info,
        soc_model=soc_model,
        htp_arch=htp_arch,
        outputs=[n for n in (model.output_names if model else []) if any(p.name == n for p, _ in placed)],
        extra={
            "dump_dir": scan.path,
            "execution": chosen.number,
            "manifest": chosen.manifest,
            "executions": [{"number": e.number, "manifest": e.manifest, "tensors": len(e.entries), "stale": e.stale}
                           for e in scan.executions],
            "unlisted_files": scan.unlisted_files,
            "unaligned": unaligned_files(scan, chosen),
            **dict(extra or {}),
        },
    )
    writer = RunWriter(out, record, force=force)
    used: set[str] = set()
    dumped = {p.name for p, _ in placed}
    for name, arr in (input_arrays or {}).items():
        if name not in dumped:
            writer.add_tensor(_unique(name, used), np.asarray(arr), kind="input", position=-1, label="graph input as fed")
    fp16_stats: dict[str, dict[str, int]] = {}
    with progress.stage("import MNN dump", total=len(placed)) as advance:
        for place, entry in placed:
            try:
                decoded = read_entry(scan.path, entry, fp16_codes=fp16_codes)
            except BadInputError as e:
                run_warnings.append(f"{entry.name}: {e.message} (not imported)")
                advance()
                continue
            layout = _layout(list(decoded.values.shape), place, model, shapes)
            if layout.warning:
                run_warnings.append(layout.warning)
            values, raw = decoded.values, decoded.raw
            if layout.transpose:
                values = _to_model_layout(values)
                raw = None if raw is None else _to_model_layout(raw)
            label = "; ".join(x for x in (place.label, decoded.note) if x) or None
            if decoded.fp16_extended:
                fp16_stats[place.name] = {"extended": decoded.fp16_extended, "saturated": decoded.fp16_saturated}
            dt = data_type(entry.data_type)
            writer.add_tensor(
                _unique(place.name, used),
                values,
                op=place.op.name if place.op else None,
                op_type=place.op.type_name if place.op else None,
                position=place.position,
                kind=place.kind,
                label=label,
                target_name=entry.name,
                layout_note=layout.note,
                source_dtype=(dt.numpy or dt.name) if dt else str(entry.data_type),
                raw=raw,
                scale=entry.scale if raw is not None else None,
                offset=entry.offset if raw is not None else None,
                equivalent=place.equivalent,
            )
            advance()
    record.extra["htp_fp16"] = _fp16_summary(fp16_codes, fp16_stats)
    if fp16_stats:
        ext = sum(v["extended"] for v in fp16_stats.values())
        sat = sum(v["saturated"] for v in fp16_stats.values())
        run_warnings.append(f"{ext} fp16 value(s) in {len(fp16_stats)} tensor(s) lie beyond ±65504 (HTP's exponent-31 "
                            f"codes, read as finite), {sat} at the ±{HTP_FP16_MAX:g} saturation rail: "
                            + ", ".join(list(fp16_stats)[:5]))
    record.warnings = run_warnings
    return writer.finish()


def _fp16_summary(codes: Fp16Codes, stats: dict[str, dict[str, int]]) -> dict[str, object]:
    """What the run records about fp16 values beyond the IEEE range (how they were read, how many, where)."""
    return {"codes": codes, "extended_values": sum(v["extended"] for v in stats.values()),
            "saturated_values": sum(v["saturated"] for v in stats.values()),
            "tensors": dict(list(stats.items())[:50])}


def _unique(name: str, used: set[str]) -> str:
    out, n = name, 2
    while out in used:
        out, n = f"{name}#{n}", n + 1
    used.add(out)
    return out


def _load_model(model: str | os.PathLike[str] | MnnModel | None) -> MnnModel | None:
    loaded = model if model is None or isinstance(model, MnnModel) else read_mnn_model(model)
    if loaded is not None and loaded.is_qnn_plugin_model:
        raise BadInputError(
            f"{loaded.path} is an MNN2QNNModel wrapper (one QNN plugin op); its tensor table does not name t<N>",
            hint="pass the source .mnn that was given to MNN2QNNModel",
        )
    return loaded


def _precision(codes: set[int]) -> str:
    types = [data_type(c) for c in codes]
    if any(t is not None and t.fixed_point for t in types):
        return "quantized"
    if any(t is not None and t.name == "FLOAT_16" for t in types):
        return "fp16"
    return "fp32"


def model_info(model: MnnModel | None) -> ModelInfo | None:
    if model is None:
        return None
    return ModelInfo(
        path=model.path,
        sha256=sha256_file(model.path),
        format="mnn",
        inputs=[TensorSpec(name=i.name, shape=list(i.shape), dtype=i.dtype) for i in model.inputs],
        outputs=[TensorSpec(name=n, shape=[], dtype="float32") for n in model.output_names],
    )


# --- validation of hostile or damaged dumps ----------------------------------------------------------------
# Kept apart from decoding on purpose: a damaged dump is refused as a whole, naming each file and manifest
# row, before any tensor is written, so no comparison (and no verdict) is ever built on one.


def json_safe(text: str) -> str:
    """``text`` as valid Unicode: bytes that were not UTF-8 (kept as lone surrogates) become U+FFFD."""
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace") \
        if any("\ud800" <= c <= "\udfff" for c in text) else text


def element_count(entry: DumpEntry) -> int:
    check_dims(entry)
    count = 1
    for d in entry.dims:
        count *= d
    return count


def check_dims(entry: DumpEntry) -> None:
    """Dimensions positive and bounded, so no size computation can overflow or allocate absurdly."""
    where = f"manifest row {entry.line} ({entry.name!r})"
    if len(entry.dims) > MAX_RANK:
        raise BadInputError(f"{where} has {len(entry.dims)} dimensions (at most {MAX_RANK})",
                            hint="the manifest is damaged; re-run with a cleared dump directory")
    bad = [d for d in entry.dims if d < 1 or d > MAX_DIM]
    if bad:
        raise BadInputError(f"{where} has dimension {bad[0]} (each must be 1..{MAX_DIM})",
                            hint="the manifest is damaged; re-run with a cleared dump directory")
    count = 1
    for d in entry.dims:
        count *= d
    if count > MAX_ELEMENTS:
        raise BadInputError(f"{where} declares {count} elements (at most {MAX_ELEMENTS})",
                            hint="the manifest is damaged; re-run with a cleared dump directory")


def row_problem(dump_dir: Path, entry: DumpEntry, execution: int | None = None) -> str | None:
    """Why one manifest row cannot be trusted (file, type, size, dims, scale, numbering), or None. Cheap: no
    data is read. ``execution``: the number of the manifest the row is in (its files carry that number)."""
    import math

    if not entry.file or "/" in entry.file or "\\" in entry.file or entry.file in (".", ".."):
        return f"names an unsafe file {entry.file[:100]!r}"
    numbered = _RAW_RE.match(entry.file)
    if numbered and execution is not None and int(numbered.group(1)) != execution:
        return (f"names a file of execution {int(numbered.group(1))}, not {execution}: a stale or renamed "
                "manifest mixes runs")
    if numbered and int(numbered.group(2)) != entry.index:
        return f"names the file of tensor {int(numbered.group(2))} in row index {entry.index}: rows and files disagree"
    try:
        count = element_count(entry)
    except BadInputError as e:
        return e.message
    dt = data_type(entry.data_type)
    if dt is None or dt.numpy is None:
        return f"has QNN data type {dt.name if dt else f'code {entry.data_type}'}, which has no host representation"
    if not math.isfinite(entry.scale):
        return f"has a non-finite scale {entry.scale}"
    if dt.fixed_point and entry.quant_encoding == ENC_SCALE_OFFSET and entry.scale == 0:
        return "has SCALE_OFFSET encoding with scale 0 (values cannot be dequantized)"
    path = dump_dir / entry.file
    try:
        real = fs.check(path, what="raw file", kind="file")
    except BadInputError as e:
        return "raw file is missing" if not os.path.lexists(path) else e.message
    size = real.stat().st_size
    expected = count * np.dtype(dt.numpy).itemsize
    if size != expected:
        return f"raw file has {size} bytes, expected {expected} for {dt.name} {entry.dims}"
    return None


def refuse_damaged(scan: DumpDirectory, chosen: DumpExecution) -> None:
    """Raise one :class:`BadInputError` listing every damaged row of the chosen execution (file and row)."""
    problems = list(chosen.malformed)
    for entry in chosen.entries:
        why = row_problem(Path(scan.path), entry, chosen.number)
        if why is not None:
            problems.append(f"{chosen.manifest} row {entry.line} ({entry.name!r}, {entry.file[:100]}): {why}")
    if problems:
        shown = "; ".join(problems[:MAX_LISTED_PROBLEMS])
        more = f" and {len(problems) - MAX_LISTED_PROBLEMS} more" if len(problems) > MAX_LISTED_PROBLEMS else ""
        raise BadInputError(
            f"dump {scan.path} execution {chosen.number} is damaged: {shown}{more}",
            hint="pull the whole dump directory again, or clear it and re-run the model; a damaged dump is never "
            "compared", details={"problems": problems[:100]},
        )
