"""Empirical check on the HTP simulator: does QNN accept this one op with these shapes, dtypes and attributes?

The parent only parses and validates the request (clear errors, no heavy imports); the graph is built and
run in a worker process because the QNN EP writes to fd 1 and shares one backend per process.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from ..errors import BadInputError
from ..mnn.soc import DEFAULT_SOC
from ..progress import NULL_PROGRESS, Progress
from .models import ProbeResult

DTYPES = ("float32", "float16", "int64", "int32", "int8", "uint8", "bool")
_SPEC = re.compile(r"^\s*(?P<dims>\d+(?:x\d+)*)(?::(?P<dtype>[a-z0-9]+))?(?:=(?P<values>[-+0-9.eE,\s]*))?\s*$")


class InputSpec(BaseModel):
    """One probe input: ``DIMS[:DTYPE][=V1,V2,...]``; values make it a constant, else it is random."""

    dims: list[int]
    dtype: str = "float32"
    values: list[float] | None = None

    def describe(self) -> str:
        text = "x".join(map(str, self.dims)) + f":{self.dtype}"
        return text + ("=" + ",".join(f"{v:g}" for v in self.values) if self.values is not None else "")


def parse_input_spec(spec: str) -> InputSpec:
    m = _SPEC.match(spec)
    if not m:
        raise BadInputError(f"bad --shape {spec!r}", hint="use DIMS[:DTYPE][=V1,V2,...], e.g. 1x3x32x32 or 4:int64=0,1,2,3")
    dims = [int(d) for d in m.group("dims").split("x")]
    dtype = m.group("dtype") or "float32"
    if dtype not in DTYPES:
        raise BadInputError(f"unsupported dtype {dtype!r} in --shape {spec!r}", hint=f"use one of {', '.join(DTYPES)}")
    values = None
    if m.group("values") is not None:
        raw = [v for v in m.group("values").replace(" ", "").split(",") if v]
        try:
            values = [float(v) for v in raw]
        except ValueError:
            raise BadInputError(f"bad values in --shape {spec!r}", hint="values are numbers separated by commas") from None
        count = 1
        for d in dims:
            count *= d
        if len(values) != count:
            raise BadInputError(f"--shape {spec!r} has {len(values)} values for {count} elements",
                                hint="give exactly one value per element")
    if any(d > 4096 for d in dims) or _numel(dims) > 16_000_000:
        raise BadInputError(f"--shape {spec!r} is too large for a probe", hint="a few thousand elements are enough to test acceptance")
    return InputSpec(dims=dims, dtype=dtype, values=values)


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def parse_attr(text: str) -> tuple[str, Any]:
    """``k=v``: v becomes an int, a float, a list of ints/floats (``1,1``) or a string."""
    if "=" not in text:
        raise BadInputError(f"bad --attr {text!r}", hint="use key=value, e.g. --attr axis=1 or --attr pads=1,1,1,1")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key.isidentifier():
        raise BadInputError(f"bad attribute name {key!r}", hint="ONNX attribute names are identifiers, e.g. kernel_shape")
    return key, _attr_value(value.strip())


def _attr_value(value: str) -> Any:
    parts = value.split(",")
    try:
        nums = [int(p) for p in parts]
        return nums if len(parts) > 1 else nums[0]
    except ValueError:
        pass
    try:
        floats = [float(p) for p in parts]
        return floats if len(parts) > 1 else floats[0]
    except ValueError:
        return value


def probe_op(onnx_op: str, inputs: list[InputSpec], attrs: dict[str, Any], *, soc_model: int = DEFAULT_SOC,
             opset: int = 20, timeout: float = 180.0, progress: Progress = NULL_PROGRESS) -> ProbeResult:
    """Run a one-op graph on the HTP simulator in a worker and report whether QNN accepted it, in QNN's words."""
    from ..mnn.soc import SOC_IDS, known_soc_hint
    from ..workers import run_worker

    if soc_model not in SOC_IDS and soc_model != 0:
        raise BadInputError(f"unknown soc_model {soc_model}", hint=known_soc_hint())
    if not inputs:
        raise BadInputError(f"no inputs for the {onnx_op} probe", hint="give --shape for each input")
    request = {"op": onnx_op, "inputs": [i.model_dump() for i in inputs], "attrs": attrs, "soc_model": soc_model, "opset": opset}
    with progress.stage("probe", total=1, message=f"probing {onnx_op} on the HTP simulator") as advance:
        result = run_worker("qnn_debug.ops.probe_worker", request, timeout=timeout, progress=progress, what="op probe")
        advance()
    return ProbeResult.model_validate(result)
