"""The ``op X --probe`` arguments that try the first failing op as it ran: its real input shapes and attributes.

A probe with default shapes tests another op: a 1x3x32x32 Add says nothing of a [1, 128, 3072] one, and a
ReduceSum without its real axes is not the same op. The shapes come from the reference run, small integer
constants (axes, shapes, indices) keep their values, and the node's attributes are passed as ``--attr``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from ..runstore import Run

MAX_DIM = 4096  # the probe's own limits (ops/probe.py): larger inputs cannot be probed as they ran
MAX_ELEMENTS = 16_000_000
MAX_VALUES = 64
DTYPES = {"float32", "float16", "int32", "int64", "int8", "uint8", "bool"}


def probe_args(model: onnx.ModelProto | None, reference: Run, node_name: str | None) -> list[str]:
    """``--shape``/``--attr`` arguments for ``node_name`` of ``model``, or [] when any input cannot be described."""
    if model is None or node_name is None:
        return []
    node = next((n for n in model.graph.node if n.name == node_name), None)
    if node is None:
        return []
    constants = {t.name: t for t in model.graph.initializer}
    shapes: list[str] = []
    for name in node.input:
        if not name:
            return []  # an omitted optional input in the middle: positions would shift
        spec = _constant_spec(constants[name]) if name in constants else _run_spec(reference, name)
        if spec is None:
            return []
        shapes += ["--shape", spec]
    attrs: list[str] = []
    for attr in node.attribute:
        text = _attr_text(attr)
        if text is None:
            return []
        attrs += ["--attr", f"{attr.name}={text}"]
    return [*shapes, *attrs]


def _run_spec(reference: Run, name: str) -> str | None:
    if not reference.has(name):
        return None
    info = reference.info(name)
    return _dims_spec(list(info.shape), info.dtype)


def _constant_spec(tensor: onnx.TensorProto) -> str | None:
    from onnx import helper, numpy_helper

    dtype = str(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    dims = [int(d) for d in tensor.dims] or [1]
    spec = _dims_spec(dims, dtype)
    if spec is None or dtype.startswith("float") or tensor.data_location == 1:
        return spec
    values = numpy_helper.to_array(tensor).reshape(-1)
    if values.size > MAX_VALUES:
        return None  # an integer table the op reads by value cannot be replaced by random data
    return spec + "=" + ",".join(str(int(v)) for v in values)


def _dims_spec(dims: list[int], dtype: str) -> str | None:
    dims = dims or [1]
    count = 1
    for d in dims:
        count *= d
    if dtype not in DTYPES or any(d < 1 or d > MAX_DIM for d in dims) or count > MAX_ELEMENTS:
        return None
    return "x".join(map(str, dims)) + f":{dtype}"


def _attr_text(attr: onnx.AttributeProto) -> str | None:
    from onnx import AttributeProto

    if attr.type == AttributeProto.INT:
        return str(attr.i)
    if attr.type == AttributeProto.FLOAT:
        return f"{attr.f:g}"
    if attr.type == AttributeProto.INTS and len(attr.ints) > 1:
        return ",".join(str(i) for i in attr.ints)
    if attr.type == AttributeProto.FLOATS and len(attr.floats) > 1:
        return ",".join(f"{f:g}" for f in attr.floats)
    if attr.type == AttributeProto.STRING:
        text = attr.s.decode("utf-8", "replace")
        return text if text and "," not in text and not _numeric(text) else None
    return None  # one-element lists, tensors and graphs have no --attr spelling


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
