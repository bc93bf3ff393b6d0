"""The parts of an LLM ``.mnn`` that the export check needs beyond ``mnn.model_reader``.

Read with the same bounds-checked FlatBuffers reader: per-tensor activation encodings
(``Net.extraTensorDescribe[].quantInfo``, where llmexport's smooth/omni quantizers put them), the
arithmetic kind of ``BinaryOp``/``Eltwise`` ops, ``AttentionParam.kv_cache`` (compilefornpu's break rule)
and the type string of leftover ``Extra`` (custom) ops. Slots are declaration positions in MNN's schema
(``schema/default/MNN.fbs``, ``Tensor.fbs``, ``TensorflowOp.fbs``, ``CaffeOp.fbs``).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from flatbuffers import number_types as nt
from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError
from ..mnn.model_reader import _DATA_TYPES, _Reader

_NET_EXTRA_DESCRIBE = 1
_NET_OPLISTS = 3
_OP_MAIN_TYPE = 1
_OP_MAIN = 2
_OP_TYPE = 5
# table TensorDescribe: blob, index, name, regions, quantInfo
_TD_INDEX = 1
_TD_QUANT = 4
# table TensorQuantInfo: scale, zero, min, max, type
_Q_SCALE, _Q_ZERO, _Q_MIN, _Q_MAX, _Q_TYPE = 0, 1, 2, 3, 4
# OpParameter union members
_PARAM_BINARY = 6
_PARAM_BLOB = 7
_PARAM_CAST = 8
_PARAM_CONV = 9
_PARAM_ELTWISE = 14
_PARAM_STRIDED_SLICE = 65
_PARAM_EXTRA = 78
# table StridedSliceParam: Index, T, beginMask, endMask, ellipsisMask, newAxisMask, shrinkAxisMask, fromType
_SS_ELLIPSIS, _SS_NEW_AXIS, _SS_FROM_TYPE = 4, 5, 7
_PARAM_ATTENTION = 98
# MNN's BinaryOpOperation (schema/default/TensorflowOp.fbs); MUL_SILU is the converter's fused silu(a) * b
BINARY_OPS = {0: "ADD", 1: "SUB", 2: "MUL", 3: "DIV", 4: "MAX_TEMP", 5: "MIN_TEMP", 6: "POW", 7: "REALDIV",
              8: "MINIMUM", 9: "MAXIMUM", 10: "GREATER", 11: "GREATER_EQUAL", 12: "LESS", 13: "FLOORDIV",
              14: "SquaredDifference", 15: "EQUAL", 16: "LESS_EQUAL", 17: "FLOORMOD", 19: "MOD", 20: "ATAN2",
              21: "LOGICALOR", 22: "NOTEQUAL", 23: "BITWISE_AND", 24: "BITWISE_OR", 25: "BITWISE_XOR",
              26: "LOGICALXOR", 27: "LEFTSHIFT", 28: "RIGHTSHIFT", 29: "MUL_SILU"}
ELTWISE_OPS = {0: "PROD", 1: "SUM", 2: "MAXIMUM", 3: "SUB"}
# The ``external`` [offset, size] field (weights kept in ``<model>.weight``): Convolution2D slot 6, Blob slot 9.
_EXTERNAL_SLOT = {_PARAM_CONV: 6, _PARAM_BLOB: 9}


class TensorEncoding(BaseModel):
    """``TensorQuantInfo`` of one tensor: float = (q - zero) * scale, q in [min, max]."""

    scale: float
    zero: float
    min: float
    max: float
    dtype: str

    def same_as(self, other: TensorEncoding) -> bool:
        return self.dtype == other.dtype and self.zero == other.zero and abs(self.scale - other.scale) <= 1e-6 * max(abs(other.scale), 1e-30)


class OpExtras(BaseModel):
    """Per-op parameters the checks read (only what is present)."""

    arith: str | None = None  # BinaryOp / Eltwise operation name
    kv_cache: bool | None = None  # Attention
    extra_type: str | None = None  # Extra (custom op left unconverted)
    cast_to: str | None = None  # Cast destination type
    slice_from: int | None = None  # StridedSliceParam.fromType: 0 from TF, 1 from ONNX/Torch
    slice_masks: bool = False  # StridedSlice with a new-axis or ellipsis mask


class MnnExtras(BaseModel):
    encodings: dict[int, TensorEncoding] = Field(default_factory=dict)
    ops: dict[int, OpExtras] = Field(default_factory=dict)  # by op position
    external_refs: int = Field(default=0, description=(
        "ops whose weights or constants live in the external weight file (``external`` set); 0 = all inline"))


def _f32(r: _Reader, tab: object, slot: int, default: float) -> float:
    from flatbuffers.table import Table

    assert isinstance(tab, Table)
    off = r._field(tab, slot)
    if not off:
        return default
    r._check(tab.Pos + off, 4)
    return float(tab.Get(nt.Float32Flags, tab.Pos + off))


def read_mnn_extras(path: str | Path) -> MnnExtras:
    """Encodings and per-op parameters of a ``.mnn``; BadInputError for an unreadable file."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size < 8:
        raise BadInputError(f"{p} is not an MNN model", hint="pass the llm.mnn written by llmexport")
    try:
        with fs.open_read(p, what="MNN model") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            r = _Reader(buf)
            net = r.root()
            out = MnnExtras()
            for td in r.table_vector(net, _NET_EXTRA_DESCRIBE):
                q = r.table(td, _TD_QUANT)
                if q is None:
                    continue
                idx = r.scalar(td, _TD_INDEX, nt.Int32Flags, -1)
                dtype = r.scalar(q, _Q_TYPE, nt.Int32Flags, 0)
                out.encodings[idx] = TensorEncoding(
                    scale=_f32(r, q, _Q_SCALE, 0.0), zero=_f32(r, q, _Q_ZERO, 0.0), min=_f32(r, q, _Q_MIN, -128.0),
                    max=_f32(r, q, _Q_MAX, 127.0), dtype=_DATA_TYPES.get(dtype, f"mnn_dtype_{dtype}"))
            for pos, op in enumerate(r.table_vector(net, _NET_OPLISTS)):
                ptype = r.scalar(op, _OP_MAIN_TYPE, nt.Uint8Flags, 0)
                param = r.table(op, _OP_MAIN) if ptype else None
                if param is None:
                    continue
                if ptype in _EXTERNAL_SLOT and r._field(param, _EXTERNAL_SLOT[ptype]):
                    out.external_refs += 1
                if ptype == _PARAM_BINARY:
                    code = r.scalar(param, 0, nt.Int32Flags, 0)
                    out.ops[pos] = OpExtras(arith=BINARY_OPS.get(code, f"BINARY_{code}"))
                elif ptype == _PARAM_ELTWISE:
                    code = r.scalar(param, 0, nt.Int8Flags, 0)
                    out.ops[pos] = OpExtras(arith=ELTWISE_OPS.get(code, f"ELTWISE_{code}"))
                elif ptype == _PARAM_ATTENTION:
                    out.ops[pos] = OpExtras(kv_cache=bool(r.scalar(param, 0, nt.Uint8Flags, 1)))
                elif ptype == _PARAM_CAST:
                    dst = r.scalar(param, 1, nt.Int32Flags, 0)
                    out.ops[pos] = OpExtras(cast_to=_DATA_TYPES.get(dst, f"mnn_dtype_{dst}"))
                elif ptype == _PARAM_STRIDED_SLICE:
                    masks = any(r.scalar(param, slot, nt.Int32Flags, 0) for slot in (_SS_ELLIPSIS, _SS_NEW_AXIS))
                    out.ops[pos] = OpExtras(slice_from=r.scalar(param, _SS_FROM_TYPE, nt.Int32Flags, 0), slice_masks=masks)
                elif ptype == _PARAM_EXTRA:
                    out.ops[pos] = OpExtras(extra_type=r.string(param, 0))
            return out
    except (ValueError, struct.error, IndexError, OverflowError, TypeError) as e:
        raise BadInputError(f"{p} is not a readable MNN model ({e})", hint="re-export the model; the file may be truncated") from None
