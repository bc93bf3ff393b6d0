"""Remove tensors' quantization entries from an ``.mnn`` (``Net.extraTensorDescribe``) in place, byte-exactly.

The converter's JSON form rounds every float to six decimals (measured on a tiny export: an encoding scale of
5.9487e-05 came back as 5.9e-05), so a JSON round trip would move every other encoding too. Here the vector of
``TensorDescribe`` offsets is compacted instead: the kept elements move forward, each uoffset is re-aimed at
its unchanged table (a uoffset counts from its own position), the length shrinks, the freed tail is zeroed.
Nothing else in the file changes, which the caller checks.
"""

from __future__ import annotations

import struct

from flatbuffers import encode
from flatbuffers import number_types as nt
from flatbuffers.table import Table

from ..errors import BadInputError

_NET_EXTRA_TENSOR_DESCRIBE = 1  # slot of Net.extraTensorDescribe (MNN schema, as in mnn.model_reader)
_TD_INDEX, _TD_QUANT = 1, 4  # TensorDescribe.index, TensorDescribe.quantInfo


def _slot(tab: Table, slot: int) -> int:
    return int(tab.Offset(4 + 2 * slot))


def drop_quant_entries(data: bytes, indexes: set[int]) -> tuple[bytes, list[int], tuple[int, int]]:
    """``data`` without the describe entries of ``indexes`` that carry a quantInfo; the removed tensor indexes and
    the byte span that changed."""
    buf = bytearray(data)
    try:
        root = Table(buf, encode.Get(nt.UOffsetTFlags.packer_type, buf, 0))
        off = _slot(root, _NET_EXTRA_TENSOR_DESCRIBE)
        if not off:
            return bytes(buf), [], (0, 0)
        start, n = root.Vector(off), root.VectorLen(off)
        targets, removed = [], []
        for i in range(n):
            at = start + 4 * i
            table = Table(buf, root.Indirect(at))
            o = _slot(table, _TD_INDEX)
            idx = int(table.Get(nt.Int32Flags, table.Pos + o)) if o else 0
            if idx in indexes and _slot(table, _TD_QUANT):
                removed.append(idx)
            else:
                targets.append(table.Pos)
        for k, target in enumerate(targets):
            struct.pack_into("<I", buf, start + 4 * k, target - (start + 4 * k))
        struct.pack_into("<I", buf, start - 4, len(targets))
        buf[start + 4 * len(targets):start + 4 * n] = bytes(4 * (n - len(targets)))
    except (struct.error, IndexError, ValueError) as e:
        raise BadInputError(f"not a readable MNN model ({e})", hint="pass the export's llm.mnn") from None
    return bytes(buf), removed, (start - 4, start + 4 * n)
