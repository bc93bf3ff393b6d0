"""Decode one dumped tensor: the raw file in its QNN dtype (HTP fp16 codes, quantized SCALE_OFFSET as
``f = (q + offset) * scale``) into float values plus the raw integers of a quantized tensor."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from .. import fs
from ..errors import BadInputError
from ..htp_fp16 import HTP_FP16_MAX, Fp16Codes, decode_fp16
from .dump_checks import check_dims, element_count
from .dump_scan import DumpEntry
from .qnn_types import ENC_SCALE_OFFSET, data_type, encoding_name


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
