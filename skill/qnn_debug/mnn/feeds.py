"""Give MNN each input in the dtype its ``.mnn`` declares, converting values and never reinterpreting bytes.

MNN holds integer tensors as int32: the converter declares an ONNX int64 ``input_ids`` as int32, and the
Python ``expr.const`` given an int64 buffer with ``dtype.int64`` makes an int32 tensor of the same bytes, so
ids ``[79, 200]`` arrive as ``[79, 0, 200, 0]`` (low and high halves; measured with MNN 3.6.1). Every feed is
therefore converted by value to the declared dtype, and a value that does not survive the conversion (an id
beyond int32, a fractional value for an integer input) is refused rather than silently changed.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadInputError

# MNN expression dtypes (``str(var.dtype)`` without ``dtype.``) → the numpy dtype MNN holds them in
MNN_HOLDS = {"float": "float32", "double": "float64", "int": "int32", "int64": "int32", "uint8": "uint8",
             "int8": "int8"}


def held_dtype(mnn_dtype: str) -> str | None:
    """The numpy dtype MNN keeps a tensor of expression dtype ``mnn_dtype`` in (``dtype.int`` → int32)."""
    return MNN_HOLDS.get(mnn_dtype.removeprefix("dtype."))


def as_declared(name: str, arr: np.ndarray, declared: str) -> np.ndarray:
    """``arr`` converted by value to ``declared`` (a numpy dtype name); refused when a value would change.

    Float to float is a rounding, as any fp32 run of the model does; every other conversion must be exact."""
    src = np.ascontiguousarray(arr)
    want = np.dtype(declared)
    if src.dtype == want:
        return src
    if src.dtype.kind not in "biuf":
        raise BadInputError(f"input {name!r} is {src.dtype} data; the .mnn declares {declared}",
                            hint=f"pass {name} as numbers ({declared})")
    if src.dtype.kind == "f" and want.kind == "f":
        return src.astype(want)
    with np.errstate(invalid="ignore", over="ignore"):
        out = src.astype(want)
        same = out.astype(src.dtype) == src
    if not bool(np.all(same)):
        where = np.unravel_index(int(np.argmin(same.reshape(-1))), src.shape) if src.ndim else ()
        value = src[where].item() if src.ndim else src.item()
        span = (f"[{np.iinfo(want).min}, {np.iinfo(want).max}]" if want.kind in "iu" else "a representable range")
        raise BadInputError(
            f"input {name!r} holds {value!r} at index {list(map(int, where))}, which the .mnn's {declared} input "
            f"cannot hold (MNN runs integer inputs as {declared}; values are converted, never reinterpreted)",
            hint=f"pass {name} values that are whole numbers in {span}" if want.kind in "iu"
            else f"pass {name} values that {declared} holds exactly",
            details={"input": name, "declared": declared, "given": str(src.dtype)})
    return out
