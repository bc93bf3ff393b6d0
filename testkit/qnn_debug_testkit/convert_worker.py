"""Worker: ONNX → ``.mnn`` the way llmexport does it, through MNN's converter and its JSON round trip.

Steps (all by the MNN wheel's converter extension, ``_tools.mnnconvert``, in this worker process because
``import _tools`` prints to fd 1): ``-f ONNX --allowCustomOp --transformerFuse`` → ``-f MNN --JsonFile`` →
edit the JSON (custom ops to MNN ops, activation encodings by tensor name) → ``-f JSON``. The converter
returns True even on failure, so each step is judged by its output file.

Request: ``{"onnx", "out", "work", "weight_bits", "quant_block" (optional: llmexport's ``--weightQuantBlock``,
block-wise scales along the input channels; 0 or absent = one scale per output channel), "ranges": {tensor name: [lo, hi]} or null (no activation
quant), "index_quant": bool, "mul_from_operand": [output name, operand name] or null}``.
Result: ``{"rewritten": {...}, "quantized": n, "peak_rss": bytes}`` (this process's VmHWM: the converter holds
the ONNX weights, so this is what a conversion costs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qnn_debug.errors import TargetError
from qnn_debug.llm.mnn_json import (
    QuantEncoding,
    integer_index_tensors,
    rewrite_custom_ops,
    set_quant,
    smooth_like,
    tensor_index,
)
from qnn_debug.progress import Progress


def _convert(args: list[str], produced: Path, what: str) -> None:
    import _tools

    produced.unlink(missing_ok=True)
    _tools.mnnconvert(["mnnconvert", *args])
    if not produced.exists() or produced.stat().st_size == 0:
        raise TargetError(f"MNN's converter failed to {what}", hint="see the converter messages in the worker log")
    weight = produced.with_name(produced.name + ".weight")
    if produced.suffix == ".mnn" and not weight.exists():
        weight.touch()  # every weight stayed inline; the LLM runtime still opens llm.mnn.weight


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    src, out, work = Path(request["onnx"]), Path(request["out"]), Path(request["work"])
    work.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw, js = out, work / "net.json"  # like llmexport: the first conversion writes llm.mnn + llm.mnn.weight
    bits = int(request.get("weight_bits") or 0)
    quant = ["--weightQuantBits", str(bits)] if bits in (4, 8) else []
    if quant and int(request.get("quant_block") or 0) > 0:
        quant += ["--weightQuantBlock", str(int(request["quant_block"]))]
    with progress.stage("convert ONNX → MNN", total=None):
        _convert(["-f", "ONNX", "--modelFile", str(src), "--MNNModel", str(raw), "--bizCode", "MNN", "--allowCustomOp",
                  "--transformerFuse", "--saveExternalData", *quant], raw, "convert the ONNX model")
        _convert(["-f", "MNN", "--modelFile", str(raw), "--JsonFile", str(js)], js, "dump the model to JSON")
    net = json.loads(js.read_text(encoding="utf-8"))
    rewritten = rewrite_custom_ops(net)
    encodings: dict[int, QuantEncoding] = {}
    if request.get("ranges") is not None:
        encodings = smooth_like(net, {k: (float(v[0]), float(v[1])) for k, v in request["ranges"].items()})
    if request.get("index_quant"):
        for idx in integer_index_tensors(net):
            encodings[idx] = QuantEncoding(scale=1.0, zero=0.0)
    if request.get("mul_from_operand"):
        dst_idx, src_idx = (tensor_index(net, n) for n in request["mul_from_operand"])
        if dst_idx is None or src_idx is None or src_idx not in encodings:
            raise TargetError(f"cannot copy an encoding between {request['mul_from_operand']}",
                              hint="the converter renamed or fused these tensors")
        encodings[dst_idx] = encodings[src_idx]
    quantized = set_quant(net, encodings) if encodings else 0
    js.write_text(json.dumps(net), encoding="utf-8")
    with progress.stage("convert JSON → MNN", total=None):
        _convert(["-f", "JSON", "--modelFile", str(js), "--MNNModel", str(out), "--bizCode", "MNN"], out,
                 "write the edited model")
    return {"rewritten": rewritten, "quantized": quantized, "peak_rss": _peak_rss()}


def _peak_rss() -> int:
    """VmHWM of this process (its own peak since exec; ``ru_maxrss`` would carry the parent's from before exec)."""
    from qnn_debug.workers.entry import status_bytes

    return status_bytes("VmHWM")
