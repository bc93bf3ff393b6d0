"""Where a dumped tensor belongs in the model and in which layout: ``t<N>`` names from the source ``.mnn``'s
tensor table, cast/dequant and op-stage names, and MNN's NC4HW4 tensors declared channel-last in QNN
(``[d0, d2, …, d1]``) transposed back to the model's layout."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel

from ..runstore import (
    Equivalence,
    TensorKind,
)
from . import equivalence
from .dump_scan import DumpEntry
from .model_reader import MnnModel, MnnOp
from .qnn_types import data_type

_T_RE = re.compile(r"^t(\d+)(?:_(cast|dequant))?$")


class Placement(BaseModel):
    """Where a dumped tensor belongs in the model."""

    name: str
    kind: TensorKind
    op: MnnOp | None = None
    position: int = -1
    order: float = 0.0  # sort key inside one position
    label: str | None = None
    layout_of: int | None = None  # tensor index whose data format applies
    reference_name: str | None = None  # model tensor name whose shape applies
    equivalent: Equivalence | None = None  # the model tensor(s) this one holds the values of

    def shape_names(self) -> list[str]:
        """Model tensors whose model-layout shape this tensor has, best first."""
        return [self.reference_name or self.name, *(self.equivalent.of if self.equivalent else [])]


def place_entry(entry: DumpEntry, model: MnnModel | None) -> Placement:
    if model is None:
        return Placement(name=entry.name or f"unnamed_{entry.index}", kind="activation", position=entry.index,
                          label="no .mnn given: QNN name kept")
    m = _T_RE.match(entry.name)
    if m:
        idx = int(m.group(1))
        stage = m.group(2)
        tname = model.tensor_name(idx)
        if tname is None:
            return Placement(name=entry.name, kind="stage", position=len(model.ops),
                              label=f"t{idx} is not in the model's tensor table ({len(model.tensor_names)} tensors)")
        op = model.producer(idx)
        is_input = any(i.index == idx for i in model.inputs)
        position = -1 if is_input or op is None else op.position
        if stage is None:
            kind: TensorKind = "input" if is_input else "output" if tname in model.output_names else "activation"
            return Placement(name=tname, kind=kind, op=None if is_input else op, position=position, order=0.5,
                              layout_of=idx, reference_name=tname, equivalent=equivalence.of_tensor(model, idx))
        dt = data_type(entry.data_type)
        # a quantized output's pre-Dequantize tensor is also called t<N>_cast in fp16 mode (onAcquire order)
        converter = "Dequantize" if stage == "dequant" or (dt is not None and dt.fixed_point) else "Cast"
        label = (f"fp16 copy of input {tname} (backend Cast)" if is_input and stage == "cast"
                 else f"{tname} before the backend's fp32 {converter}" if tname in model.output_names
                 else f"{stage} stage of {tname}")
        return Placement(name=f"{tname}@{stage}", kind="stage", op=None if is_input else op, position=position,
                          order=1.0 if is_input else 0.0, label=label, layout_of=idx, reference_name=tname,
                          equivalent=equivalence.of_cast(model, idx, stage))
    op, stage_name = _stage_op(entry.name, model)
    if op is not None:
        return Placement(name=f"{op.name}@{stage_name}", kind="stage", op=op, position=op.position, order=0.25,
                          label=f"internal stage {stage_name} of op {op.name} ({op.type_name})",
                          layout_of=op.outputs[0] if op.outputs else None,
                          equivalent=equivalence.of_stage(model, op, stage_name))
    return Placement(name=entry.name or f"unnamed_{entry.index}", kind="stage", position=len(model.ops),
                      label="backend tensor not traceable to an op of the model")


def _stage_op(name: str, model: MnnModel) -> tuple[MnnOp | None, str]:
    """``<node>_<Stage>``: the longest op node name that prefixes the tensor name."""
    parts = name.split("_")
    for cut in range(len(parts) - 1, 0, -1):
        op = model.op_by_node_name("_".join(parts[:cut]))
        if op is not None:
            return op, "_".join(parts[cut:])
    return None, ""


def _channel_last(shape: Sequence[int]) -> list[int]:
    return [shape[0], *shape[2:], shape[1]] if len(shape) >= 3 else list(shape)


def to_model_layout(values: np.ndarray) -> np.ndarray:
    n = values.ndim
    return np.ascontiguousarray(np.transpose(values, (0, n - 1, *range(1, n - 1))))


class Layout(BaseModel):
    transpose: bool  # channel-last QNN dims → model layout
    note: str
    warning: str | None = None


def layout_for(dims: list[int], place: Placement, model: MnnModel | None, shapes: Mapping[str, Sequence[int]]) -> Layout:
    """Decide whether a dumped tensor is channel-last: by the model's shape when known, else by MNN's format."""
    fmt = model.tensor_format(place.layout_of) if model is not None and place.layout_of is not None else "UNKNOWN"
    channel_last = fmt == "NC4HW4" and len(dims) >= 3
    restored = f"restored NCHW from NHWC {_x(dims)}"
    want = next((shapes[n] for n in place.shape_names() if n in shapes), None)
    if want is not None:
        want = list(want)
        fits_as_is = dims == want
        fits_permuted = len(dims) >= 3 and dims == _channel_last(want)
        if fits_as_is and fits_permuted:  # e.g. C == H == W: the model's data format decides
            return Layout(transpose=channel_last, note=f"{restored if channel_last else f'model layout {_x(dims)}'} "
                           f"(shape ambiguous; MNN format {fmt})")
        if fits_as_is:
            return Layout(transpose=False, note=f"model layout {_x(dims)}")
        if fits_permuted:
            return Layout(transpose=True, note=restored)
        warning = f"{place.name}: QNN dims {_x(dims)} match neither model shape {_x(want)} nor its channel-last form"
        return Layout(transpose=channel_last, note=f"{restored} (MNN format NC4HW4)" if channel_last
                       else f"QNN dims {_x(dims)} kept", warning=warning)
    if channel_last:
        return Layout(transpose=True, note=f"{restored} (MNN format NC4HW4)")
    if model is None:
        return Layout(transpose=False, note=f"QNN layout {_x(dims)} (model layout unknown without the .mnn)")
    return Layout(transpose=False, note=f"model layout {_x(dims)} (MNN format {fmt})")


def _x(dims: Sequence[int]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"
