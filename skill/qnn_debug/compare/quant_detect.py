"""Is the target quantized, whatever it came from — and does a device encoding clip the data?

A dump brought as an ``.npz`` carries no dtype or encoding, yet the model says it is quantized: QDQ nodes in
the ONNX model, quant attributes in the ``.mnn`` (``extraTensorDescribe[].quantInfo``), fixed-point dtypes with
scale/offset in an MNN dump manifest or a run. Judging such a target against the fp16 floor calls healthy 8- and
16-bit runs ``precision`` and every QDQ step a jump.

**Encoding-range errors.** A device encoding narrower than the data (a Mul output that inherits one operand's
scale; an activation calibrated on the wrong data) clips: a clear share of the reference lies outside the
encoding's range, the target sits at the rail there, and clipping the reference at that range reproduces the
target. That is quantization, located at that tensor; a wrong op does none of the three (its output is not
the reference clipped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runstore import QuantParams, Run
from .align import load_in_reference_layout, match_layout
from .metrics import error_stats, metric_values
from .schema import TensorRow

MIN_OUTSIDE_SHARE = 0.02  # "a clear share": 2 % of the reference beyond the device range (healthy: see tests)
# LLM outliers: a few elements far outside (a SwiGLU Mul output with an operand's scale: 0.2 % of the elements)
# carry most of the error; then clipping must explain the target much better than the reference does.
MIN_OUTLIER_SHARE = 0.0005
OUTLIER_CLIP_GAIN_DB = 12.0
RAIL_FRACTION = 0.5  # of those, at least half sit at the rail in the target
CLIP_GAIN_DB = 6.0  # clipping the reference must explain the target this much better than the reference itself
CLIP_MATCH_DB = 20.0  # ... and reproduce it at least this well
_QRANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
            "uint32": (0, 2**32 - 1), "int32": (-(2**31), 2**31 - 1)}


@dataclass
class Encoding:
    """A tensor's per-tensor encoding in QNN's convention ``float = (q + offset) * scale``."""

    scale: float
    offset: int
    qmin: int
    qmax: int
    source: str

    @property
    def lo(self) -> float:
        return (self.qmin + self.offset) * self.scale

    @property
    def hi(self) -> float:
        return (self.qmax + self.offset) * self.scale


@dataclass
class QuantDetection:
    quantized: bool
    sources: list[str] = field(default_factory=list)
    model_encodings: dict[str, Encoding] = field(default_factory=dict)  # from the model (QDQ / .mnn)


def _from_record(q: QuantParams) -> Encoding | None:
    if isinstance(q.scale, list) or isinstance(q.offset, list):
        return None
    lo, hi = _QRANGES.get(q.raw_dtype, (0, 255))
    return Encoding(float(q.scale), int(q.offset), lo, hi, "target")


def onnx_encodings(model: Any) -> dict[str, Encoding]:
    """Activation QuantizeLinear encodings of an ONNX model, by the float tensor they quantize."""
    from ..targets.onnx_capture import qdq_points

    out: dict[str, Encoding] = {}
    try:
        points = qdq_points(model)
    except Exception:  # non-constant scales: nothing to read, the model is still QDQ
        return out
    for p in points:
        if isinstance(p.scale, list) or isinstance(p.zero_point, list):
            continue
        lo, hi = _QRANGES.get(p.q_dtype, (0, 255))
        out[p.float_name] = Encoding(float(p.scale), -int(p.zero_point), lo, hi, "model QDQ")
    return out


def _mnn_encodings(path: str) -> dict[str, Encoding]:
    from ..mnn.model_reader import read_mnn_model

    model = read_mnn_model(path)
    out: dict[str, Encoding] = {}
    for idx, q in model.quant.items():
        name = model.tensor_name(idx)
        if name is None or q.scale <= 0:
            continue
        if q.dtype == "int16":  # MNN's QNN backend maps INT16 to UFIXED_16 with offset = zero
            out[name] = Encoding(q.scale, int(q.zero), 0, 65535, ".mnn quant attribute")
        else:  # INT8 → SFIXED_8, offset forced to 0
            out[name] = Encoding(q.scale, 0, int(q.min), int(q.max), ".mnn quant attribute")
    return out


def detect(target: Run, rows: list[TensorRow], model: Any = None, *, mnn_model: str | None = None) -> QuantDetection:
    """Quantized when the target's own dtypes say so, or the ONNX model has QDQ nodes, or the target's .mnn
    has quant attributes; ``sources`` says which, in words."""
    sources: list[str] = []
    quant_rows = sum(r.quantized for r in rows)
    if target.record.precision == "quantized" or quant_rows:
        sources.append(f"the target's own tensors ({quant_rows} with fixed-point dtypes and scale/offset)")
    encodings: dict[str, Encoding] = {}
    if model is not None:
        qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
        if qdq:
            encodings.update(onnx_encodings(model))
            sources.append(f"the ONNX model ({len(qdq)} QuantizeLinear/DequantizeLinear nodes)")
    info = target.record.model
    path = info.path if info is not None and info.format == "mnn" and info.path else mnn_model
    if path:
        try:
            mnn = _mnn_encodings(path)
        except Exception:  # an unreadable .mnn is reported where it is opened
            mnn = {}
        if mnn:
            encodings.update(mnn)
            sources.append(f"the .mnn ({len(mnn)} tensors with quant attributes)")
    return QuantDetection(bool(sources), sources, encodings)


@dataclass
class RangeClip:
    """A device encoding that clips the data at ``tensor``."""

    tensor: str
    row: TensorRow
    lo: float
    hi: float
    step: float
    encoding_source: str  # "target" (its recorded encoding), "model QDQ", ".mnn", or "inferred from the values"
    scale: float | None
    offset: int | None
    ref_min: float
    ref_max: float
    outside_share: float
    at_rail_share: float
    clip_sqnr_db: float | None
    raw_sqnr_db: float | None
    in_range_sqnr_db: float | None
    model_range: tuple[float, float] | None = None  # the calibrated (model) range, when it differs

    def evidence(self) -> dict[str, Any]:
        def g(x: float | None) -> float | None:
            return None if x is None else float(f"{x:.6g}")

        return {"tensor": self.tensor, "device_range": [g(self.lo), g(self.hi)], "device_scale": g(self.scale),
                "device_offset": self.offset, "encoding_source": self.encoding_source,
                "reference_range": [g(self.ref_min), g(self.ref_max)],
                "reference_outside_share": round(self.outside_share, 4), "target_at_rail_share": round(self.at_rail_share, 4),
                "clipped_reference_sqnr_db": g(self.clip_sqnr_db), "target_sqnr_db": g(self.raw_sqnr_db),
                "in_range_sqnr_db": g(self.in_range_sqnr_db),
                "model_range": None if self.model_range is None else [g(self.model_range[0]), g(self.model_range[1])]}


def _sqnr(t: np.ndarray, r: np.ndarray) -> float | None:
    if t.size == 0:
        return None
    return metric_values(error_stats(t, r))["sqnr_db"]


def _grid_step(values: np.ndarray) -> float:
    """The quantization step of dequantized values: the smallest clear gap between distinct values."""
    u = np.unique(values[np.isfinite(values)])
    if u.size < 3:
        return 0.0
    gaps = np.diff(u)
    gaps = gaps[gaps > 1e-9 * max(1.0, float(np.abs(u).max()))]
    return float(np.min(gaps)) if gaps.size else 0.0


def find_range_clip(rows: Mapping[str, TensorRow], reference: Run, target: Run,
                    model_encodings: Mapping[str, Encoding]) -> RangeClip | None:
    """The first tensor (execution order) whose device encoding clips a clear share of the reference."""
    for name, row in sorted(rows.items(), key=lambda kv: kv[1].position):
        if row.position < 0 or not reference.has(name) or not target.has(row.name):
            continue
        found = _check(name, row, reference, target, model_encodings.get(name))
        if found is not None:
            return found
    return None


def _check(name: str, row: TensorRow, reference: Run, target: Run, model_enc: Encoding | None) -> RangeClip | None:
    ref_rec, rec = reference.info(name), target.info(row.name)
    if match_layout(ref_rec.shape, rec.shape) is None:
        return None
    r = np.asarray(reference.array(name, mmap=False), dtype=np.float64).reshape(-1)
    t = load_in_reference_layout(target, rec, ref_rec.shape).astype(np.float64).reshape(-1)
    if r.size < 16 or not (np.isfinite(r).all() and np.isfinite(t).all()):
        return None
    enc = _from_record(rec.quant) if rec.quant is not None else None
    if enc is not None:
        lo, hi, step, source, scale, offset = enc.lo, enc.hi, enc.scale, "target", enc.scale, enc.offset
    else:
        step = _grid_step(t)
        lo, hi, source, scale, offset = float(t.min()), float(t.max()), "inferred from the target's values", None, None
        if step <= 0:
            return None
    tol = 0.5 * step
    above, below = r > hi + tol, r < lo - tol
    outside = float(np.count_nonzero(above | below)) / r.size
    if outside < MIN_OUTLIER_SHARE:
        return None
    rail = np.zeros(t.size, dtype=bool)
    if above.any():
        rail |= t >= hi - tol
    if below.any():
        rail |= t <= lo + tol
    at_rail = float(np.count_nonzero(rail & (above | below))) / r.size
    if at_rail < RAIL_FRACTION * outside:
        return None
    clipped = np.clip(r, lo, hi)
    clip_db, raw_db = _sqnr(t, clipped), _sqnr(t, r)
    if clip_db is None or raw_db is None or clip_db < CLIP_MATCH_DB or clip_db < raw_db + CLIP_GAIN_DB:
        return None
    if outside < MIN_OUTSIDE_SHARE and clip_db < raw_db + OUTLIER_CLIP_GAIN_DB:
        return None  # a few outliers beyond the range that do not explain the error
    inside = ~(above | below)
    model_range = None
    if model_enc is not None and (abs(model_enc.hi - hi) > tol or abs(model_enc.lo - lo) > tol):
        model_range = (model_enc.lo, model_enc.hi)
    return RangeClip(tensor=name, row=row, lo=lo, hi=hi, step=step, encoding_source=source, scale=scale, offset=offset,
                     ref_min=float(r.min()), ref_max=float(r.max()), outside_share=outside, at_rail_share=at_rail,
                     clip_sqnr_db=clip_db, raw_sqnr_db=raw_db, in_range_sqnr_db=_sqnr(t[inside], r[inside]),
                     model_range=model_range)
