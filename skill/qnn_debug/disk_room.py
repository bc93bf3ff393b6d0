"""Room on disk for a run folder, checked before the first hour is spent rather than when the disk is full.

Why: a baseline keeps the CPU fp32 reference and the fp16 floor of every tensor the model computes, and a dump the
target's value of each. At full depth that is tens of GB: Qwen3-VL-2B's vision encoder at 1024 patches computes
14.5 GB of tensors, its ``bisect`` folder reached 28 GB and its ``diagnose`` stopped an hour in on a full disk
(``OSError`` writing a tensor). The size is known from the graph alone before anything runs (ONNX shape inference
at the run's input shapes; the weights are not read), so a run that cannot fit is refused with the numbers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from . import fs
from .errors import DiskSpaceError

GB = 1_000_000_000
MAX_PARSE_BYTES = 512 << 20  # a graph file this large holds its weights inline
HEADROOM = 1 * GB  # logs, reports, npz overhead and whatever else shares the disk meanwhile
# copies of every computed tensor each tool keeps: the reference and the fp16 floor (baseline), the target's (dump)
COPIES = {"baseline": 2, "dump": 1, "diagnose": 3, "bisect": 2}


class DiskNeed(BaseModel):
    """What a run will write and what the disk of its folder has (bytes)."""

    tensors: int  # bytes of the tensors the model computes, once
    copies: int
    already: int  # what the run folder holds already (a resumed run reuses it)
    free: int

    @property
    def needed(self) -> int:
        return max(0, self.tensors * self.copies - self.already) + HEADROOM


def computed_bytes(model: str | os.PathLike[str], shapes: dict[str, list[int]] | None = None,
                   inputs: str | os.PathLike[str] | None = None) -> int:
    """Bytes of every tensor ``model``'s nodes compute at the given input shapes (from ``shapes``, else from the
    ``inputs`` .npz, else as declared); tensors whose shape inference cannot fix count 0 (a lower bound), and so
    does a graph file with its weights inline above 512 MiB."""
    from onnx import helper

    from .inputs import fix_input_shapes
    from .onnx_graph import load_onnx, static_shapes

    if fs.size(model, what="model file") > MAX_PARSE_BYTES:
        return 0  # weights inline: not parsed a second time only to count (the check then lets the run go)
    graph = load_onnx(model, load_external_data=False)
    fixed = dict(shapes or {})
    if inputs is not None and str(inputs).endswith(".npz") and Path(inputs).is_file():
        declared = {i.name for i in graph.graph.input}
        for name, dims in _npz_shapes(Path(inputs)).items():
            if name in declared and name not in fixed:
                fixed[name] = dims
    if fixed:
        try:
            graph = fix_input_shapes(graph, fixed)
        except Exception:  # shapes that do not fit the model: the tool's own check of them says how (typed)
            return 0
    names = _computed_names(graph)
    shapes_of = static_shapes(graph, names)
    if len(shapes_of) < len(names):  # e.g. a Slice whose ends ONNX's inference cannot compute
        shapes_of.update(_symbolic_shapes(graph, names - set(shapes_of)))
    total = 0
    for dims, elem in shapes_of.values():
        try:
            size = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize
        except (KeyError, TypeError, ValueError):
            continue
        total += int(np.prod(dims, dtype=np.int64)) * size
    return total


def _npz_shapes(path: Path) -> dict[str, list[int]]:
    """The array shapes an .npz declares, read from the .npy headers alone (no array decompressed); {} for a file
    that cannot be read that way: the tool's own reading of the inputs then says what is wrong with it."""
    import zipfile

    out: dict[str, list[int]] = {}
    try:
        with fs.open_read(path, what="--inputs") as raw, zipfile.ZipFile(raw) as z:
            for member in z.namelist():
                if not member.endswith(".npy"):
                    continue
                with z.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, _ = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, _ = np.lib.format.read_array_header_2_0(f)
                out[member.removesuffix(".npy")] = [int(d) for d in shape]
    except Exception:  # corrupt, not a zip, odd headers: validated (with a clear error) where the inputs are read
        return {}
    return out


def _symbolic_shapes(graph: Any, names: set[str]) -> dict[str, tuple[list[int], int]]:
    """ONNX Runtime's symbolic shape inference for what ONNX's own left open (best effort: {} when it fails). On
    llmexport's decoder ONNX fixes under half the tensors (the rotary Slices stop it), this one all of them."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(graph, auto_merge=True, guess_output_rank=True)
    except Exception:  # its own failures on graphs it does not know: the estimate stays a lower bound
        return {}
    out: dict[str, tuple[list[int], int]] = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output]:
        t = v.type.tensor_type
        if v.name not in names or not t.elem_type or not t.HasField("shape"):
            continue
        dims = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if all(d >= 0 for d in dims):
            out[v.name] = (dims, int(t.elem_type))
    return out


def _computed_names(graph: Any) -> set[str]:
    """Outputs of nodes that read the inputs, directly or not: what a run keeps (a value computed from constants
    alone, like a weight a Constant node holds, is not a tensor of the run)."""
    const = {t.name for t in graph.graph.initializer}
    out: set[str] = set()
    for n in graph.graph.node:  # in topological order, as ONNX requires
        ins = [i for i in n.input if i]
        if all(i in const for i in ins):
            const.update(o for o in n.output if o)
        else:
            out.update(o for o in n.output if o)
    return out


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _folder_bytes(path: Path) -> int:
    if not path.is_dir():
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def disk_need(out: str | os.PathLike[str], tool: str, model: str | os.PathLike[str],
              shapes: dict[str, list[int]] | None = None, inputs: str | os.PathLike[str] | None = None) -> DiskNeed:
    """What ``tool`` will write into ``out`` for ``model`` against the free space of the disk ``out`` is on."""
    target = fs.check(out, what="output folder", must_exist=False)  # inside the allowed roots
    return DiskNeed(tensors=computed_bytes(model, shapes, inputs), copies=COPIES[tool], already=_folder_bytes(target),
                    free=shutil.disk_usage(_existing(target.resolve())).free)


def check_disk_room(out: str | os.PathLike[str], tool: str, model: str | os.PathLike[str],
                    shapes: dict[str, list[int]] | None = None, inputs: str | os.PathLike[str] | None = None) -> None:
    """A :class:`~qnn_debug.errors.DiskSpaceError` when the run cannot fit the disk of ``out``."""
    need = disk_need(out, tool, model, shapes, inputs)
    if need.needed <= need.free:
        return
    raise DiskSpaceError(
        f"{tool} of {Path(model).name} writes about {need.needed / GB:.1f} GB into {out} ({need.copies} copies of the "
        f"{need.tensors / GB:.1f} GB of tensors the model computes at these input shapes), and that disk has "
        f"{need.free / GB:.1f} GB free",
        hint="give --out a folder on a disk with room, free space, or run on fewer tokens or patches (--shape)",
        details=need.model_dump() | {"needed": need.needed})
