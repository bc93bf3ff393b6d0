"""Worker: edit a real ``llm.mnn`` in MNN's converter JSON and write it back (for :mod:`.real_faults`).

``-f MNN --JsonFile`` → edits → ``-f JSON --MNNModel`` over the same file, as llmexport's own smooth-quant pass
does; ``llm.mnn.weight`` stays as it is (the JSON keeps the external offsets). In this worker process because
``import _tools`` prints to fd 1. Request: ``{"model", "edits": [{"bypass": tensor name} | {"index_quant": true}]}``.
Result: ``{"bypassed": [...], "quantized": n}``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from qnn_debug.errors import TargetError
from qnn_debug.llm.mnn_json import QuantEncoding, integer_index_tensors, set_quant, tensor_index
from qnn_debug.progress import Progress


def _convert(args: list[str], produced: Path, what: str) -> None:
    import _tools

    produced.unlink(missing_ok=True)
    _tools.mnnconvert(["mnnconvert", *args])
    if not produced.exists() or produced.stat().st_size == 0:
        raise TargetError(f"MNN's converter failed to {what}", hint="see the converter messages in the worker log")


def bypass(net: dict[str, Any], name: str) -> None:
    """Remove the op writing tensor ``name``; its readers take the op's first input instead."""
    out = tensor_index(net, name)
    ops = net["oplists"]
    op = next((o for o in ops if out in (o.get("outputIndexes") or [])), None)
    if out is None or op is None:
        raise TargetError(f"no op writes {name!r} in llm.mnn", hint="the converter renamed or fused it")
    src = op["inputIndexes"][0]
    for o in ops:
        if o is not op and out in (o.get("inputIndexes") or []):
            o["inputIndexes"] = [src if i == out else i for i in o["inputIndexes"]]
    ops.remove(op)


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    model = Path(request["model"])
    with tempfile.TemporaryDirectory(prefix="qnn-debug-mnn-edit-") as tmp:
        js = Path(tmp) / "net.json"
        _convert(["-f", "MNN", "--modelFile", str(model), "--JsonFile", str(js)], js, "dump llm.mnn to JSON")
        net = json.loads(js.read_text(encoding="utf-8"))
        bypassed: list[str] = []
        quantized = 0
        for edit in request.get("edits", []):
            if "bypass" in edit:
                bypass(net, str(edit["bypass"]))
                bypassed.append(str(edit["bypass"]))
            if edit.get("index_quant"):
                quantized += set_quant(net, {i: QuantEncoding(scale=1.0, zero=0.0) for i in integer_index_tensors(net)})
        js.write_text(json.dumps(net), encoding="utf-8")
        staged = Path(tmp) / "llm.mnn"
        _convert(["-f", "JSON", "--modelFile", str(js), "--MNNModel", str(staged), "--bizCode", "MNN"], staged,
                 "write the edited llm.mnn")
        model.write_bytes(staged.read_bytes())
    return {"bypassed": bypassed, "quantized": quantized}
