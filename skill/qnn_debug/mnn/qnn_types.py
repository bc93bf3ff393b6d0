"""QNN's data-type and quantization-encoding codes as MNN's dumper prints them (decimal ``%u``).

Values are those of Qualcomm's ``Qnn_DataType_t`` / ``Qnn_QuantizationEncoding_t`` (``QnnTypes.h``); the
manifest columns ``data_type`` and ``quant_encoding`` carry them. Kept apart from the reader so triage
and compare can name a code without importing numpy-heavy code paths.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QnnDataType:
    code: int
    name: str
    numpy: str | None  # None: no host representation (packed 4-bit, string, undefined)
    fixed_point: bool = False  # SFIXED/UFIXED: integers carrying a quantization encoding

    @property
    def is_float(self) -> bool:
        return self.name.startswith("FLOAT")


_TYPES = [
    QnnDataType(0x0008, "INT_8", "int8"),
    QnnDataType(0x0016, "INT_16", "int16"),
    QnnDataType(0x0032, "INT_32", "int32"),
    QnnDataType(0x0064, "INT_64", "int64"),
    QnnDataType(0x0108, "UINT_8", "uint8"),
    QnnDataType(0x0116, "UINT_16", "uint16"),
    QnnDataType(0x0132, "UINT_32", "uint32"),
    QnnDataType(0x0164, "UINT_64", "uint64"),
    QnnDataType(0x0216, "FLOAT_16", "float16"),
    QnnDataType(0x0232, "FLOAT_32", "float32"),
    QnnDataType(0x0264, "FLOAT_64", "float64"),
    QnnDataType(0x0304, "SFIXED_POINT_4", None, True),
    QnnDataType(0x0308, "SFIXED_POINT_8", "int8", True),
    QnnDataType(0x0316, "SFIXED_POINT_16", "int16", True),
    QnnDataType(0x0332, "SFIXED_POINT_32", "int32", True),
    QnnDataType(0x0404, "UFIXED_POINT_4", None, True),
    QnnDataType(0x0408, "UFIXED_POINT_8", "uint8", True),
    QnnDataType(0x0416, "UFIXED_POINT_16", "uint16", True),
    QnnDataType(0x0432, "UFIXED_POINT_32", "uint32", True),
    QnnDataType(0x0508, "BOOL_8", "bool"),
    QnnDataType(0x0608, "STRING", None),
    QnnDataType(0x7FFFFFFF, "UNDEFINED", None),
]
QNN_DATA_TYPES: dict[int, QnnDataType] = {t.code: t for t in _TYPES}

# Qnn_QuantizationEncoding_t
ENC_SCALE_OFFSET = 0
ENC_AXIS_SCALE_OFFSET = 1
ENC_UNDEFINED = 0x7FFFFFFF
QUANT_ENCODINGS: dict[int, str] = {
    0: "SCALE_OFFSET",
    1: "AXIS_SCALE_OFFSET",
    2: "BW_SCALE_OFFSET",
    3: "BW_AXIS_SCALE_OFFSET",
    4: "BLOCK",
    5: "BLOCKWISE_EXPANSION",
    6: "VECTOR",
    ENC_UNDEFINED: "UNDEFINED",
}


def data_type(code: int) -> QnnDataType | None:
    return QNN_DATA_TYPES.get(code)


def encoding_name(code: int) -> str:
    return QUANT_ENCODINGS.get(code, f"encoding {code}")
