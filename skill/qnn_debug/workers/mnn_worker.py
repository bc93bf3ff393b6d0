"""Worker: convert ONNX → MNN and run MNN CPU fp32 with every tensor exposed (``import MNN`` prints to fd 1).

Found by trying (MNN 3.6.1 pip): ``MNN.expr.load_as_dict`` names every tensor of a ``.mnn`` file and
links it to its inputs, but evaluating that graph after swapping the input crashes (``Var.resize``
segfaults on a dynamic input) or fails on shape chains. The Module API works:
``MNN.nn.load_module_from_file(path, inputs, <tensor names>)`` returns all those tensors in one
``forward`` (MNN then keeps them, so fusions that would hide them are not applied). NC4HW4 tensors are converted to NCHW, so MNN's tensors are in the ONNX layout.
``_tools.mnnconvert`` returns True even when the source file is missing, so success is judged by
the converted file, and the converter's log is kept.

Request: ``{"model", "format", "out", "force", "inputs_npz", "record", "names"}``; ``names`` maps each
tensor to capture to ``[position, op, op_type, kind]`` (from the ONNX graph, or from the ``.mnn`` op list).
Writes a run directory (with the converted ``model.mnn`` for ONNX input) and returns ``{"tensors": n}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from ..errors import BadInputError, TargetError
from ..progress import Progress
from ..runstore import Equivalence, RunRecord, RunWriter, TensorKind


def convert(src: Path, dst: Path, biz_code: str = "MNN", extra: list[str] | None = None) -> None:
    """ONNX → MNN with MNN's converter extension (never the ``mnnconvert`` script: it pip-installs)."""
    import _tools

    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    ok = _tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", str(src), "--MNNModel", str(dst), "--bizCode", biz_code,
                            *(extra or [])])
    if not ok or not dst.exists() or dst.stat().st_size == 0:
        raise TargetError(f"MNN's converter could not convert {src.name}",
                          hint="see the worker log for the converter's messages; the model may use ops MNN does not support")


def _graph(path: Path) -> tuple[Any, dict[str, Any]]:
    import MNN

    if not path.exists():
        raise BadInputError(f"model file {path} does not exist", hint="check the path")
    try:
        var_map = MNN.expr.load_as_dict(str(path))
    except Exception as e:
        raise BadInputError(f"{path} is not a readable .mnn model: {e}", hint="re-convert the model") from None
    if not var_map:
        raise BadInputError(f"{path} is not a readable .mnn model (no tensors)", hint="re-convert the model")
    return MNN.expr, var_map


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Convert (ONNX) and run on MNN CPU fp32 with the wanted tensors as outputs; write the run."""
    import MNN
    import numpy as np

    record = RunRecord.model_validate(request["record"])
    writer = RunWriter(request["out"], record, force=bool(request.get("force")))
    if request["format"] == "onnx":
        mnn_path = writer.dir / "model.mnn"
        with progress.stage("mnn-cpu: convert", total=None, message="mnn-cpu: converting ONNX → MNN"):
            convert(Path(request["model"]), mnn_path)
        record.extra["mnn_model"] = "model.mnn"
    else:
        mnn_path = Path(request["model"])
    F, var_map = _graph(mnn_path)
    inputs, _ = F.get_inputs_and_outputs(var_map)
    feeds = dict(np.load(request["inputs_npz"], allow_pickle=False))
    wanted: dict[str, list[Any]] = request["names"]
    names = [n for n in wanted if n in var_map and n not in inputs and var_map[n].op_type not in ("Const", "Input")]
    with progress.stage("mnn-cpu: run", total=None, message=f"mnn-cpu: running with {len(names)} tensors exposed"):
        module = MNN.nn.load_module_from_file(str(mnn_path), list(inputs), names,
                                              precision_mode=F.PrecisionMode.High, backend=F.Backend.CPU)
        fed = {n: _fed(n, feeds[n], inputs[n]) for n in inputs}
        values = module.forward([_const(F, fed[n], inputs[n]) for n in inputs])
    producers: dict[str, str] = request.get("onnx_producers") or {}  # ONNX tensor → node, when the model is known
    fused = _fused_outputs(mnn_path, producers, names) if producers else {}
    skipped: list[str] = []
    for name in inputs:
        writer.add_tensor(name, fed[name], kind="input", label=f"as fed to MNN ({fed[name].dtype})")
    with progress.stage("mnn-cpu: save", total=len(names), message="mnn-cpu: saving tensors") as advance:
        for name, var in zip(names, values, strict=True):
            advance()
            arr = _read(F, var)
            if arr is None:
                skipped.append(name)
                continue
            position, op, op_type, kind = wanted[name]
            eq = fused.get(name)
            writer.add_tensor(name, arr, op=op, op_type=op_type, position=position, kind=cast(TensorKind, kind),
                              label=f"MNN {var_map[name].op_type}" + (f"; {eq.note}" if eq else ""), equivalent=eq)
    record.extra["mnn_tensors_not_in_model"] = len(
        [n for n, v in var_map.items() if n not in wanted and n not in inputs and v.op_type not in ("Const", "Input")])
    if skipped:
        record.warnings.append(f"{len(skipped)} MNN tensor(s) could not be read (empty or shape-only): {', '.join(skipped[:10])}")
    writer.finish()
    return {"tensors": len(record.tensors), "skipped": len(skipped)}


def _fused_outputs(mnn_path: Path, producers: dict[str, str], names: list[str]) -> dict[str, Equivalence]:
    """Captured tensors a fused MNN op wrote under an earlier ONNX tensor's name (see ``mnn.equivalence``);
    ``producers``: ONNX tensor → the node that makes it."""
    from ..mnn.equivalence import of_fused_output
    from ..mnn.model_reader import read_mnn_model

    model = read_mnn_model(mnn_path)
    node_outputs: dict[str, list[str]] = {}
    for tensor, node in producers.items():
        node_outputs.setdefault(node, []).append(tensor)
    found: dict[str, Equivalence] = {}
    for name in names:
        index = model.tensor_index(name)
        eq = None if index is None else of_fused_output(model, index, node_outputs, producers.get(name))
        if eq is not None:
            found[name] = eq
    return found


def _fed(name: str, arr: Any, var: Any) -> Any:
    """The feed in the dtype the model declares for it, converted by value (see :mod:`qnn_debug.mnn.feeds`)."""
    from ..mnn.feeds import as_declared, held_dtype

    declared = held_dtype(str(var.dtype))
    if declared is None:
        raise BadInputError(f"the .mnn declares input {name!r} as {var.dtype}, which MNN's Python API cannot feed",
                            hint="re-convert the model with float32 or int32 inputs")
    return as_declared(name, arr, declared)


def _const(F: Any, arr: Any, var: Any) -> Any:
    import numpy as np

    # never int64: MNN's const would take its bytes as int32 (see mnn.feeds); ``_fed`` converted the values
    dtypes = {"float32": F.float, "float64": F.double, "int32": F.int, "uint8": F.uint8, "int8": F.int8}
    a = np.ascontiguousarray(arr)
    if str(a.dtype) not in dtypes:
        raise BadInputError(f"MNN cannot take input data of dtype {a.dtype}", hint="use float32 or int32 inputs")
    fmt = var.data_format
    layout = F.NCHW if fmt == F.NC4HW4 else fmt
    c = F.const(a, list(a.shape), layout, dtypes[str(a.dtype)])
    return F.convert(c, F.NC4HW4) if fmt == F.NC4HW4 else c


def _read(F: Any, var: Any) -> Any:
    """A tensor as a numpy array in NCHW layout, or None when MNN cannot read it (empty tensors)."""
    import numpy as np

    try:
        if var.data_format == F.NC4HW4:
            var = F.convert(var, F.NCHW)
        arr = np.array(var.read(), copy=True)
    except Exception:
        return None
    return arr if arr.size else None
