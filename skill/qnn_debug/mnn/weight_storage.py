"""How a ``.mnn`` stores its convolution weights, read back as the converter flags that made it: ``--fp16``
(``IDSTQuan.type`` 3, MNN's SaveHalfFloat) or ``--weightQuantBits N`` (types 1/2 with ``aMaxOrBits`` N, MNN's
IDSTEncoder). A fix re-converted with the same flags ships weights stored as the user's were."""

from __future__ import annotations

import mmap
import os
import struct
from collections import Counter
from pathlib import Path

from flatbuffers import number_types as nt

from .. import fs
from ..errors import BadInputError
from .model_reader import _NET_OPLISTS, _OP_MAIN, _OP_MAIN_TYPE, _Reader

_PARAM_CONVOLUTION2D = 9  # OpParameter union: NONE 0, QuantizedAdd 1, ..., Blob 7, CastParam 8, Convolution2D 9
_CONV_QUAN = 3  # table Convolution2D { common, weight, bias, quanParameter, ... }
_IDST_TYPE, _IDST_BITS = 2, 8  # table IDSTQuan { buffer, alpha, type, useInt32, quantScale, scaleIn, scaleOut, aMaxOrBits }


def weight_flags(path: str | os.PathLike[str]) -> list[str]:
    """The converter flags the file's weight storage shows (empty: plain fp32 weights)."""
    p = Path(path)
    try:
        with fs.open_read(p, what="MNN model") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            r = _Reader(buf)
            kinds: Counter[tuple[int, int]] = Counter()
            for op in r.table_vector(r.root(), _NET_OPLISTS):
                if r.scalar(op, _OP_MAIN_TYPE, nt.Uint8Flags, 0) != _PARAM_CONVOLUTION2D:
                    continue
                conv = r.table(op, _OP_MAIN)
                quan = r.table(conv, _CONV_QUAN) if conv is not None else None
                if quan is not None:
                    kinds[(r.scalar(quan, _IDST_TYPE, nt.Int32Flags, 0),
                           r.scalar(quan, _IDST_BITS, nt.Int32Flags, 0))] += 1
    except (ValueError, struct.error, IndexError, OverflowError, TypeError) as e:
        raise BadInputError(f"{p} is not a readable MNN model ({e})", hint="pass the .mnn you ship") from None
    if not kinds:
        return []
    (kind, bits), _ = kinds.most_common(1)[0]
    if kind == 3:
        return ["--fp16"]
    if kind in (1, 2) and 2 <= bits <= 8:
        return ["--weightQuantBits", str(bits)]
    return []
