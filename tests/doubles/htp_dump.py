"""Test double of an MNN QNN dump made on the HTP: given every tensor's value (model layout, by the .mnn's tensor
names), write what MNN's QNNTensorDumper writes for an fp16 graph — ``t<N>`` names, channel-last NC4HW4 tensors,
``t<N>_cast`` copies of inputs/outputs plus the fp32 outputs — with HTP's fp16 codes (exponent 31 finite, saturation
at 131008) or, for an IEEE producer, IEEE fp16 (inf beyond 65504)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from doubles.htp_fp16 import htp_fp16_bits
from doubles.mnn_formats import nchw_to_qnn, write_dump
from qnn_debug.mnn.model_reader import read_mnn_model


def mnn_values(mnn_model: Path, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``values`` by model tensor name, extended to the .mnn's own tensors: ConvertTensor outputs copy their input."""
    model = read_mnn_model(mnn_model)
    out = dict(values)
    for op in model.ops:
        if op.type_name == "ConvertTensor" and op.inputs and op.outputs:
            src = model.tensor_names[op.inputs[0]]
            if src in out:
                out.setdefault(model.tensor_names[op.outputs[0]], out[src])
    return out


def write_htp_dump(dump_dir: Path, mnn_model: Path, values: dict[str, np.ndarray], *, codes: str = "htp") -> list[str]:
    """Write execution 0 of an fp16 dump; returns the .mnn tensor names that had no value (not dumped)."""
    model = read_mnn_model(mnn_model)
    full = mnn_values(mnn_model, values)
    inputs = {i.index for i in model.inputs}

    def half(arr: np.ndarray) -> np.ndarray:
        if codes == "htp":
            return htp_fp16_bits(arr)
        with np.errstate(over="ignore"):
            return arr.astype(np.float16).view(np.uint16)

    rows: list[tuple[str, np.ndarray, int]] = []
    missing = []
    for op in model.ops:
        if op.type_name == "Const":
            continue
        for t in op.outputs:
            name = model.tensor_names[t]
            if name not in full:
                missing.append(name)
                continue
            arr = np.asarray(full[name], dtype=np.float32)
            qnn = nchw_to_qnn(arr) if model.tensor_format(t) == "NC4HW4" else arr
            if t in inputs:
                rows.append((f"t{t}_cast", half(qnn), 534))
            elif name in model.output_names:
                rows.append((f"t{t}_cast", half(qnn), 534))
                rows.append((f"t{t}", qnn.astype(np.float32), 562))
            else:
                rows.append((f"t{t}", half(qnn), 534))
    write_dump(dump_dir, 0, rows)
    return missing
