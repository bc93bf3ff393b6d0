"""Fix for ``quantization`` located at an encoding that clips: the encoding recomputed from the reference range.

The activation QuantizeLinear of the tensor (and the DequantizeLinear nodes reading it) get the scale and zero
point that cover the reference's [min, max] (widened to hold 0, as QNN encodings do) in the same integer type;
the same numbers are written as a QNN/AIMET-style encoding override JSON for tools that take one. The fixed QDQ
model is dumped on the HTP simulator (quantized) and compared with the same baseline.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .. import fs
from ..errors import BadInputError
from ..onnx_graph import load_onnx
from ..progress import Progress
from ..runstore import INPUTS_FILE, load_run
from .models import FixResult, ProofCheck
from .output import write_next_to
from .source import Source, numbers

SUFFIX = "encodings-fixed"
GAIN_DB = 6.0  # the re-run must gain at least this much SQNR at the tensor


def corrected(lo: float, hi: float, dtype: np.dtype[Any]) -> tuple[float, int]:
    """Scale and zero point covering [lo, hi] (and 0) in integer type ``dtype``."""
    info = np.iinfo(dtype)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / float(info.max - info.min) or 1.0
    zero = int(np.clip(round(info.min - lo / scale), info.min, info.max))
    # the rounded zero point shifts the grid by up to half a step: widen the scale so both ends stay inside
    ends = [hi / (info.max - zero) if info.max > zero else 0.0, lo / (info.min - zero) if info.min < zero else 0.0]
    return float(max(scale, *ends)), zero


def fix_encoding(source: Source, *, model: str | None, out: Path, soc_model: int, timeout: float, force: bool,
                 progress: Progress) -> FixResult:
    from ..compare.pipeline import compare_paths
    from ..dump import run_dump
    from ..targets import DumpRequest

    res = source.result
    ev = res.verdict.evidence.get("encoding_range") or {}
    tensor = ev.get("tensor") or (res.first_failing.tensor if res.first_failing else None)
    model_path = Path(model or res.model or "")
    if tensor is None or model_path.suffix.lower() != ".onnx":
        raise BadInputError("the encoding fix edits the QDQ .onnx the target ran, and needs the clipped tensor",
                            hint="pass --model with the QDQ model the device or simulator ran")
    if source.baseline is None:
        raise BadInputError(f"{res.reference} is not a baseline's reference", hint="compare against a baseline folder")
    ref = load_run(source.baseline / "reference")
    values = np.asarray(ref.array(tensor), dtype=np.float64)
    lo, hi = float(values.min()), float(values.max())
    qdq = load_onnx(model_path)
    fixed, encoding = _apply(qdq, tensor, lo, hi)
    artefact = write_next_to(model_path, SUFFIX, fixed.SerializeToString())
    override = write_next_to(model_path.with_suffix(".json"), SUFFIX, json.dumps(
        {"activation_encodings": {tensor: [encoding]}, "param_encodings": {}}, indent=1).encode())
    outputs = [o.name for o in qdq.graph.output]
    before = numbers(res, outputs, tensor=tensor, report=str(source.path))
    fs.make_dirs(out, what="fix output directory")
    with progress.stage("fix: re-run", total=None, message="fix: the corrected encoding on the simulator"):
        run_dump(DumpRequest(model=artefact, out=out / "htp-sim", precision="quantized", soc_model=soc_model,
                             inputs=source.baseline / INPUTS_FILE, force=force, timeout=timeout), progress)
        after_res = compare_paths(source.baseline, out / "htp-sim", report_dir=out / "report", progress=progress)
    after = numbers(after_res, outputs, tensor=tensor, report=str(out / "report"))
    v = after_res.verdict
    gained = (after.tensor_sqnr_db or -1e9) - (before.tensor_sqnr_db or 0.0)
    proof = [
        ProofCheck(name="the encoding covers the reference range", passed=encoding["min"] <= lo and encoding["max"] >= hi,
                   detail=f"reference [{lo:.4g}, {hi:.4g}]; encoding [{encoding['min']:.4g}, {encoding['max']:.4g}] "
                   f"(scale {encoding['scale']:.4g}, offset {encoding['offset']}, {encoding['bitwidth']} bits); before: "
                   f"device range {ev.get('device_range')}"),
        ProofCheck(name="the simulator no longer clips there", passed=not (v.pattern == "encoding_range" and
                   (v.evidence.get("encoding_range") or {}).get("tensor") == tensor) and v.kind != "real_bug",
                   detail=f"verdict after: {v.kind} ({v.pattern}): {v.summary}"),
        ProofCheck(name=f"SQNR at {tensor} gains at least {GAIN_DB:g} dB", passed=gained >= GAIN_DB,
                   detail=f"{_db(before.tensor_sqnr_db)} -> {_db(after.tensor_sqnr_db)}"),
    ]
    proven = all(c.passed for c in proof)
    from ..next_step import NextStep

    return FixResult(
        kind="encoding", verdict=f"{res.verdict.kind} ({res.verdict.pattern})", artefact=str(artefact), proven=proven,
        proof=proof, before=before, after=after, out=str(out), commands=[],
        summary=f"{'Proven' if proven else 'NOT proven'}: {tensor}'s encoding recomputed from the reference range "
        f"[{lo:.4g}, {hi:.4g}] in {artefact.name} (override {override.name}); SQNR at {tensor} "
        f"{_db(before.tensor_sqnr_db)} -> {_db(after.tensor_sqnr_db)}, verdict {v.kind} ({v.pattern}).",
        next_steps=[NextStep(tool="dump_qnn", cli=f"qnn-debug dump {shlex.quote(str(artefact))} --precision quantized "
                             f"--inputs {shlex.quote(str(source.baseline / INPUTS_FILE))}",
                             why="the corrected QDQ model on the simulator (the proof above did this)")])


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def _apply(model: onnx.ModelProto, tensor: str, lo: float, hi: float) -> tuple[onnx.ModelProto, dict[str, Any]]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    q = next((n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor), None)
    if q is None or len(q.input) < 3:
        raise BadInputError(f"{tensor} has no activation QuantizeLinear with a zero point in this model",
                            hint="pass --model with the QDQ model the target ran")
    inits = {i.name: i for i in m.graph.initializer}
    zp = numpy_helper.to_array(inits[q.input[2]])
    scale, zero = corrected(lo, hi, zp.dtype)
    names = {i.name for i in m.graph.initializer}

    def fresh(base: str) -> str:
        cand = base
        while cand in names:
            cand += "_"
        names.add(cand)
        return cand

    s_name, z_name = fresh(f"{tensor}_scale_fixed"), fresh(f"{tensor}_zero_point_fixed")
    m.graph.initializer.extend([numpy_helper.from_array(np.array(scale, dtype=np.float32), s_name),
                                numpy_helper.from_array(np.array(zero, dtype=zp.dtype), z_name)])
    for n in [q, *(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])]:
        n.input[1], n.input[2] = s_name, z_name
    info = np.iinfo(zp.dtype)
    encoding = {"bitwidth": int(zp.dtype.itemsize * 8), "dtype": "int", "is_symmetric": "False",
                "min": float((info.min - zero) * scale), "max": float((info.max - zero) * scale),
                "scale": scale, "offset": int(-zero) if info.min == 0 else int(info.min - zero)}
    return m, encoding
