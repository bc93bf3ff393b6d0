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

    tensors: int  # bytes of the tensors a baseline captures, once
    copies: int
    already: int  # what the run folder holds already (a resumed run reuses it)
    free: int

    @property
    def needed(self) -> int:
        return max(0, self.tensors * self.copies - self.already) + HEADROOM


def computed_bytes(model: str | os.PathLike[str], shapes: dict[str, list[int]] | None = None,
                   inputs: str | os.PathLike[str] | None = None) -> int:
    """Bytes of every tensor a baseline of ``model`` captures (its inputs and float node outputs, as
    ``capture_plan`` names them) at the given input shapes (from ``shapes``, else from the
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
    from .targets.onnx_capture import capture_plan

    names = {t.name for t in capture_plan(graph)}  # what a baseline keeps (and a dump writes)
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
    """The array shapes an .npz declares, from the .npy headers alone (``npz_safe.check_npz``: no array
    decompressed); {} for a file it refuses: the tool's own reading of the inputs then says what is wrong with it."""
    from .errors import BadInputError
    from .npz_safe import check_npz

    try:
        return {name: list(info.shape) for name, info in check_npz(path).items()}
    except BadInputError:
        return {}


def _symbolic_shapes(graph: Any, names: set[str]) -> dict[str, tuple[list[int], int]]:
    """ONNX Runtime's symbolic shape inference for what ONNX's own left open (best effort: {} when it fails). On
    llmexport's decoder ONNX fixes under half the tensors (the rotary Slices stop it), this one all of them."""
    from .onnx_graph import fixed_shapes

    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(graph, auto_merge=True, guess_output_rank=True)
    except Exception:  # its own failures on graphs it does not know: the estimate stays a lower bound
        return {}
    return fixed_shapes(inferred, names)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it is not a folder)."""
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
    return DiskNeed(tensors=computed_bytes(model, shapes, inputs), copies=COPIES[tool], already=folder_bytes(target),
                    free=shutil.disk_usage(_existing(target)).free)


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
