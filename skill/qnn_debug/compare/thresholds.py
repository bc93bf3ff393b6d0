"""Every number the verdict depends on, in one place, with where it comes from.

Measured on Qualcomm's HTP simulator (soc 69, fp16) for this project: per-tensor HTP error stays within
0.66-1.67x of the fp16 floor (about ±4.5 dB) through a 24-block conv net; Sigmoid has an absolute error
floor near 2.4e-4; a dominant Softmax class tops out at 0.99853516 (error 1.46e-3); 8-bit QDQ costs
25-40 dB per tensor. Typical bugs cost far more: an NHWC flatten 0.2 dB SQNR, a flipped Resize coordinate
mode 6-16 dB, a zeroed input 0 dB. The gates below sit between those two populations.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

# Absolute error tolerated on an op's output because HTP evaluates it with a LUT/approximation.
# 4x the measured Sigmoid floor, 2x the measured Softmax dominant-class error.
DEFAULT_OP_ABS_TOL: dict[str, float] = {
    "Sigmoid": 1e-3,
    "HardSigmoid": 1e-3,
    "HardSwish": 2e-3,
    "Softmax": 3e-3,
    "LogSoftmax": 3e-3,
    "Tanh": 1e-3,
}

# A graph output below this SQNR against fp32 is unusable (measured healthy fp16 outputs: 45-72 dB on the conv
# nets, PP-OCR and MiniLM; an fp16-overflowing L2-norm: -5.6 dB). ``ok`` needs the fp16 floor's outputs above it.
OUTPUT_OK_DB = 30.0


class Thresholds(BaseModel):
    """Gates of the verdict. Defaults are conservative; override per call for unusual models."""

    # A floor better than this is treated as this: HTP arithmetic is never better than ~fp16 (a dominant
    # Softmax class never reaches 1.0, so a floor of 200 dB would make every Softmax look broken).
    floor_cap_db: float = 60.0
    # A tensor within this many dB of the (capped) floor is "at the floor" (healthy HTP: within ~5 dB).
    excess_ok_db: float = 10.0
    # An op is a suspect when its output is this much worse than its worst input (anchors: 10-15 dB).
    jump_db: float = 15.0
    # Local error: the op re-run on the target's inputs. Above this SQNR the op did its job (fp16).
    # Healthy HTP ops measured >= 57.5 dB locally on PP-OCR cls, det and rec (worst: Softmax, Sigmoid).
    local_ok_db: float = 50.0
    # ... and for quantized outputs (8-bit per-tensor activations reach ~30-50 dB locally).
    quant_local_ok_db: float = 25.0
    # ... or when the worst local error is within this many quantization steps.
    quant_lsb_ok: float = 4.0
    # An alternative semantics "reproduces" the target when it reaches this SQNR ...
    pattern_match_db: float = 35.0
    quant_pattern_match_db: float = 22.0
    # ... and beats the op's nominal semantics by this margin.
    pattern_margin_db: float = 12.0
    # Element-wise tolerance for the "outside_tol" share: |t - r| > atol + rtol * |r| (QAIRT's RtolAtol defaults).
    atol: float = 1e-2
    rtol: float = 1e-2
    # End-to-end gate reported for the model outputs (MNN ModuleBasic fails above 1 % diff rate).
    output_diff_rate: float = 1e-2
    # ``ok`` only when every graph output of the fp16 floor reaches this SQNR: a bad floor is itself a finding.
    output_ok_db: float = OUTPUT_OK_DB
    # Drift: a stretch whose excess grows by at least this much, no op jumping, is reported as a precision note.
    drift_db: float = 10.0
    # How many suspects get a local re-run before giving up (each costs one small ORT session).
    max_local_checks: int = 8
    op_abs_tol: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_OP_ABS_TOL))
