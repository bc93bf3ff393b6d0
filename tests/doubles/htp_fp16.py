"""Test-side encoder of HTP's fp16 codes (the inverse of ``qnn_debug.htp_fp16.decode_fp16``).

HTP writes values beyond 65504 with the exponent field 31 as finite numbers ``2**16 * (1 + m/1024)`` and
saturates at 131008 (code 0x7FFF); a dump double of an overflowing model needs exactly those codes.
"""

from __future__ import annotations

import numpy as np


def htp_fp16_bits(values: np.ndarray) -> np.ndarray:
    """float values → uint16 codes as HTP would store them (round to nearest, saturate at ±131008)."""
    v = np.clip(np.asarray(values, dtype=np.float64), -131008.0, 131008.0)
    mag = np.abs(v)
    big = mag > 65504.0
    bits = np.minimum(mag, 65504.0).astype(np.float16).view(np.uint16).copy()
    mant = np.clip(np.round((mag[big] / 65536.0 - 1.0) * 1024.0), 0, 1023).astype(np.uint16)
    bits[big] = np.uint16(0x7C00) | mant
    bits[v < 0] |= np.uint16(0x8000)
    return bits.reshape(np.shape(values))
