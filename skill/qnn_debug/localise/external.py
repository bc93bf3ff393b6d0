"""ONNX models opened without their weights: a graph in memory, the weights left in the model's data files.

Why: a 0.6B decoder is 2-3 GB of fp32 weights in external data; loading them (and every deep copy a cut
makes) multiplies that. Opened with ``load_external_data=False`` the graph is a few MB, a cut-out block
keeps its initializers as references (location, offset, length) into the *original* file, and a session
built from the block's bytes is told where that file is, so it reads only the block's weights. Every data
file is checked through :mod:`qnn_debug.fs` when the model is opened and read through it when a block's
weights must be in the protobuf (the fp16 floor rounds them; a block saved for ``diagnose`` carries them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
from onnx import TensorProto

from .. import fs
from ..errors import BadInputError, TargetError


@dataclass
class LazyModel:
    """A model's graph without its external weights, and the folder its data files are in."""

    path: Path
    model: onnx.ModelProto
    base: Path

    @property
    def external(self) -> bool:
        return any(_is_external(t) for t in _tensors(self.model))


def _tensors(model: onnx.ModelProto) -> list[TensorProto]:
    return [*model.graph.initializer, *(a.t for n in model.graph.node for a in n.attribute if a.HasField("t"))]


def _is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def _info(t: TensorProto) -> tuple[str, int, int]:
    kv = {e.key: e.value for e in t.external_data}
    try:
        return kv["location"], int(kv.get("offset", "0")), int(kv["length"])
    except (KeyError, ValueError):
        raise BadInputError(f"tensor {t.name!r} has incomplete external data ({dict(kv)})",
                            hint="re-save the model with onnx.save(..., save_as_external_data=True)") from None


def open_lazy(path: str | Path) -> LazyModel:
    """Open ``path`` without its external weights; each data file it names must exist inside the allowed roots."""
    from ..onnx_graph import ensure_node_names, load_onnx

    model = ensure_node_names(load_onnx(path, load_external_data=False))
    base = fs.real_path(path, what="model file").parent
    seen: set[str] = set()
    for t in _tensors(model):
        if _is_external(t):
            location, offset, length = _info(t)
            if location not in seen:
                seen.add(location)
                size = fs.check(base / location, what=f"external data of tensor {t.name!r}", kind="file").stat().st_size
            else:
                size = (base / location).stat().st_size
            if offset < 0 or length < 0 or offset + length > size:
                raise BadInputError(f"tensor {t.name!r} points past the end of {location} "
                                    f"(offset {offset} + length {length} > {size} bytes)",
                                    hint="the data file does not belong to this model; re-export both together")
    return LazyModel(Path(path), model, base)


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the model's initializers, whether inside the protobuf or in external data."""
    total = 0
    for t in _tensors(model):
        if _is_external(t):
            total += _info(t)[2]
        else:
            total += len(t.raw_data) or int(np.prod(t.dims, dtype=np.int64)) * 4
    return total


def tensor_sizes(model: onnx.ModelProto) -> dict[str, int]:
    """Initializer name → its bytes (inside the protobuf or in external data)."""
    sizes = {}
    for t in model.graph.initializer:
        if _is_external(t):
            sizes[t.name] = _info(t)[2]
        else:
            sizes[t.name] = len(t.raw_data) or int(np.prod(t.dims, dtype=np.int64)) * 4
    return sizes


def materialise(model: onnx.ModelProto, base: Path) -> onnx.ModelProto:
    """A copy of ``model`` (a cut-out block: small) with its external weights read into the protobuf."""
    m = copy.deepcopy(model)
    by_file: dict[str, list[TensorProto]] = {}
    for t in _tensors(m):
        if _is_external(t):
            by_file.setdefault(_info(t)[0], []).append(t)
    for location, tensors in by_file.items():
        with fs.open_read(base / location, what="external data file") as f:
            for t in sorted(tensors, key=lambda x: _info(x)[1]):
                _, offset, length = _info(t)
                f.seek(offset)
                data = f.read(length)
                if len(data) != length:
                    raise BadInputError(f"{location} ends before tensor {t.name!r}", hint="re-export the model")
                t.raw_data = data
                t.data_location = TensorProto.DEFAULT
                del t.external_data[:]
    return m


def rounded_weight(t: TensorProto, base: Path, chunk: int = 16 << 20) -> np.ndarray:
    """An external fp32 weight read from its data file and rounded through fp16 where |w| <= 65504 (as the fp16
    floor rounds weights), a chunk at a time: one fp32 copy of the weight, no temporaries of its size."""
    from ..onnx_graph import FP16_MAX

    location, offset, length = _info(t)
    out = np.empty(length // 4, dtype=np.float32)
    raw = out.view(np.uint8)
    with fs.open_read(base / location, what="external data file") as f:
        reader = cast(Any, f)
        reader.seek(offset)
        for start in range(0, length, chunk):  # chunk is a multiple of 4: whole floats per chunk
            end = min(start + chunk, length)
            got = start
            while got < end:
                n = reader.readinto(raw[got:end])
                if not n:
                    raise BadInputError(f"{location} ends before tensor {t.name!r}", hint="re-export the model")
                got += n
            part = out[start // 4:end // 4]
            np.copyto(part, part.astype(np.float16).astype(np.float32), where=np.abs(part) <= FP16_MAX)
    return out.reshape(tuple(t.dims))


def cpu_session(model: onnx.ModelProto, base: Path | None, *, optimize: bool = True,
                initializers: dict[str, np.ndarray] | None = None) -> Any:
    """An ORT CPU session from the model's bytes; its external weights are read from ``base``.

    ``optimize=False`` (the fp16 floor of a piece): no graph optimisation, so the rounding of each weight
    (Clip → Cast → Cast in the graph) runs at inference instead of being constant-folded, which kept every
    intermediate copy of the weight alive: the 1.2 GB LM head at 1.7B width peaked at 6.4 GiB, not 3.3."""
    import onnxruntime as ort

    from ..targets.onnx_capture import one_line

    so = ort.SessionOptions()
    so.log_severity_level = 3
    # no pre-packed second copy of every MatMul weight: a block runs once, and its weights are the memory
    so.add_session_config_entry("session.disable_prepacking", "1")
    # no memory arena: an output array ORT hands back keeps its allocator alive, so a block's boundary value kept
    # for the next block pinned that block's whole arena (all its activations): the main process grew ~45 MB per
    # block at 0.6B width (469 MiB after 8 layers; 149 MiB without the arena, measured)
    so.enable_cpu_mem_arena = False
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    kept = []
    for name, value in (initializers or {}).items():  # used in place: the session shares these arrays' memory
        kept.append(ort.OrtValue.ortvalue_from_numpy(value))
        so.add_initializer(name, kept[-1])
    if base is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base))
    try:
        session = ort.InferenceSession(model.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
        session.qd_initializers = kept  # alive as long as the session
        return session
    except Exception as e:
        raise BadInputError(f"ONNX Runtime cannot load the model: {one_line(e)}",
                            hint="check the model with onnx.checker, or re-export it") from None


def run_cpu(model: onnx.ModelProto, base: Path | None, feeds: dict[str, np.ndarray],
            names: list[str], *, optimize: bool = True,
            initializers: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run ``model`` on ORT CPU fp32 with ``names`` marked as outputs (external weights read from ``base``)."""
    from ..onnx_graph import mark_all
    from ..targets.onnx_capture import one_line

    session = cpu_session(mark_all(model, names), base, optimize=optimize, initializers=initializers)
    wanted = [o.name for o in session.get_outputs()]
    wanted_feeds = {i.name for i in session.get_inputs()}
    try:
        values = session.run(wanted, {k: v for k, v in feeds.items() if k in wanted_feeds})
    except Exception as e:
        raise TargetError(f"ONNX Runtime CPU failed to run the model: {one_line(e)}",
                          hint="check the input shapes and dtypes") from None
    return dict(zip(wanted, values, strict=True))
