"""Test-side writers of MNN's file formats, used by tests and by the test doubles of MNN's tools.

Not a reader and not engine code: it writes QNN dump directories the way ``QNNTensorDumper`` does
(manifest header, ``%06d``/``%04d`` file names, sanitised names, raw little-endian bytes) and a minimal
MNN2QNNModel-style wrapper ``.mnn`` (Input ops + one QNN ``Plugin`` op) with the ``flatbuffers`` builder.
Field slot numbers follow MNN's schema (``schema/default/MNN.fbs``); only the fields our reader reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HEADER = "index\tname\tfile\tdata_type\tdimensions\tquant_encoding\tscale\toffset\n"
UNDEFINED = 2147483647


def sanitize(name: str) -> str:
    """MNN's file-name sanitising: every byte but alnum, ``-``, ``_``, ``.`` becomes ``_``."""
    return re.sub(rb"[^A-Za-z0-9._-]", b"_", name.encode()).decode() if name else "unnamed"


def write_dump(
    directory: Path,
    execution: int,
    rows: Sequence[tuple[str, np.ndarray, int] | tuple[str, np.ndarray, int, int, float, int]],
) -> Path:
    """Write one execution: rows are (name, array in QNN layout, dtype code[, encoding, scale, offset])."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [HEADER]
    for i, row in enumerate(rows):
        name, arr, code = row[0], row[1], row[2]
        enc, scale, offset = (row[3], row[4], row[5]) if len(row) == 6 else (UNDEFINED, 0.0, 0)  # type: ignore[misc]
        file = f"execution_{execution:06d}_tensor_{i:04d}_{sanitize(name)}.raw"
        (directory / file).write_bytes(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes())
        dims = "x".join(str(d) for d in arr.shape)
        scale_txt = f"{scale:.9g}" if enc == 0 else "0"
        offset_txt = str(offset) if enc == 0 else "0"
        lines.append(f"{i}\t{name}\t{file}\t{code}\t{dims}\t{enc}\t{scale_txt}\t{offset_txt}\n")
    manifest = directory / f"manifest_{execution:06d}.tsv"
    manifest.write_text("".join(lines), encoding="utf-8")
    return manifest


def nchw_to_qnn(arr: np.ndarray) -> np.ndarray:
    """MNN NC4HW4 tensors are declared channel-last in QNN: [d0, d1, d2, ...] → [d0, d2, ..., d1]."""
    if arr.ndim < 3:
        return arr
    return np.ascontiguousarray(np.moveaxis(arr, 1, -1))


def build_plugin_model(path: Path, *, inputs: dict[str, list[int]], outputs: list[str], source_indexes: dict[str, int],
                       binary: str, graph: str, dump: bool) -> Path:
    """A wrapper model like MNN2QNNModel's output: Input ops and one Plugin op of type "QNN"."""
    import flatbuffers

    b = flatbuffers.Builder(1024)

    def string_vector(items: list[str]) -> int:
        offs = [b.CreateString(s) for s in items]
        b.StartVector(4, len(offs), 4)
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    def int_vector(items: list[int]) -> int:
        b.StartVector(4, len(items), 4)
        for v in reversed(items):
            b.PrependInt32(v)
        return b.EndVector()

    def table_vector(offs: list[int]) -> int:
        b.StartVector(4, len(offs), 4)
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    def attr_list(key: str, strings: list[str]) -> int:
        k = b.CreateString(key)
        s = string_vector(strings)
        b.StartObject(5)  # ListValue
        b.PrependUOffsetTRelativeSlot(0, s, 0)
        lst = b.EndObject()
        b.StartObject(9)  # Attribute
        b.PrependUOffsetTRelativeSlot(3, k, 0)
        b.PrependUOffsetTRelativeSlot(7, lst, 0)
        return int(b.EndObject())

    def attr_str(key: str, value: str) -> int:
        k, v = b.CreateString(key), b.CreateString(value)
        b.StartObject(9)
        b.PrependUOffsetTRelativeSlot(0, v, 0)
        b.PrependUOffsetTRelativeSlot(3, k, 0)
        return int(b.EndObject())

    def attr_int(key: str, value: int) -> int:
        k = b.CreateString(key)
        b.StartObject(9)
        b.PrependInt32Slot(1, value, 0)
        b.PrependUOffsetTRelativeSlot(3, k, 0)
        return int(b.EndObject())

    names = [*inputs, *outputs, "qnn/plugin/op"]
    ops = []
    for i, (name, dims) in enumerate(inputs.items()):
        d = int_vector(dims)
        b.StartObject(3)  # Input
        b.PrependUOffsetTRelativeSlot(0, d, 0)
        b.PrependInt8Slot(2, 0, 2)  # NCHW
        param = b.EndObject()
        n, outs = b.CreateString(name), int_vector([i])
        b.StartObject(8)  # Op
        b.PrependUint8Slot(1, 21, 0)
        b.PrependUOffsetTRelativeSlot(2, param, 0)
        b.PrependUOffsetTRelativeSlot(3, n, 0)
        b.PrependUOffsetTRelativeSlot(4, outs, 0)
        b.PrependInt32Slot(5, 34, 0)
        ops.append(b.EndObject())
    attrs = [
        attr_list("allGraphName", [graph]),
        attr_list("inputs", [f"t{source_indexes[n]}" for n in inputs]),
        attr_list("outputs", [f"t{source_indexes[n]}" for n in outputs]),
        attr_str("path", binary),
        attr_int("dump_intermediate_outputs", int(dump)),
    ]
    ptype, pattrs = b.CreateString("QNN"), table_vector(attrs)
    b.StartObject(2)  # Plugin
    b.PrependUOffsetTRelativeSlot(0, ptype, 0)
    b.PrependUOffsetTRelativeSlot(1, pattrs, 0)
    plugin = b.EndObject()
    pname = b.CreateString("qnn/plugin/op")
    pins = int_vector(list(range(len(inputs))))
    pouts = int_vector([len(inputs) + j for j in range(len(outputs))])
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, pins, 0)
    b.PrependUint8Slot(1, 30, 0)
    b.PrependUOffsetTRelativeSlot(2, plugin, 0)
    b.PrependUOffsetTRelativeSlot(3, pname, 0)
    b.PrependUOffsetTRelativeSlot(4, pouts, 0)
    b.PrependInt32Slot(5, 256, 0)
    ops.append(b.EndObject())
    oplists, tnames, onames = table_vector(ops), string_vector(names), string_vector(outputs)
    b.StartObject(12)  # Net
    b.PrependUOffsetTRelativeSlot(3, oplists, 0)
    b.PrependUOffsetTRelativeSlot(4, onames, 0)
    b.PrependUOffsetTRelativeSlot(7, tnames, 0)
    b.Finish(b.EndObject())
    path.write_bytes(bytes(b.Output()))
    return path
