"""Decode fp16 buffers the way Qualcomm's HTP writes them: no inf/NaN, the exponent field 31 is a finite binade.

IEEE binary16 reserves exponent 31 for inf/NaN; HTP does not. Measured on the HTP simulator (MNN QNN dumps,
soc 69): codes ``0x7C00..0x7FFF`` decode as ``2**16 * (1 + m/1024)`` (they match the fp32 reference's
squares to 4.5e-4), the sign bit gives the negatives, and the largest code ``0x7FFF`` = 131008 is where HTP
saturates. Reading such a buffer as IEEE fp16 invents inf/NaN the device never produced, so every reader of
an HTP fp16 buffer decodes through :func:`decode_fp16`; only an IEEE producer (``codes="ieee"``) keeps the
IEEE meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

FP16_MAX = 65504.0  # largest finite IEEE fp16 value
HTP_FP16_MAX = 131008.0  # HTP's saturation value: code 0x7FFF = 2**16 * (1 + 1023/1024)
Fp16Codes = Literal["htp", "ieee"]
_EXP_MASK = 0x7C00
_SATURATED = 0x7FFF


@dataclass(frozen=True)
class Fp16Decoded:
    """Values as float32, and how many used the extended exponent (and of those, the saturation code)."""

    values: np.ndarray
    extended: int  # exponent-field-31 codes read as finite values
    saturated: int  # codes 0x7FFF / 0xFFFF: ±131008, HTP's rail


def decode_fp16(data: np.ndarray, codes: Fp16Codes = "htp") -> Fp16Decoded:
    """float16 data (any shape) → float32 with ``codes`` semantics for the exponent-31 codes."""
    half = np.ascontiguousarray(data, dtype=np.float16)
    out = half.astype(np.float32)
    if codes == "ieee" or half.size == 0:
        return Fp16Decoded(out, 0, 0)
    bits = half.view(np.uint16)
    magnitude = bits & np.uint16(0x7FFF)
    special = (magnitude & np.uint16(_EXP_MASK)) == _EXP_MASK
    extended = int(np.count_nonzero(special))
    if not extended:
        return Fp16Decoded(out, 0, 0)
    mant = (magnitude[special] & np.uint16(0x03FF)).astype(np.float32)
    sign = np.where(bits[special] & np.uint16(0x8000), np.float32(-1.0), np.float32(1.0))
    out[special] = sign * np.float32(2.0**16) * (np.float32(1.0) + mant / np.float32(1024.0))
    saturated = int(np.count_nonzero(magnitude == _SATURATED))
    return Fp16Decoded(out, extended, saturated)
