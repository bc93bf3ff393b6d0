"""Read MNN's QNN intermediate-tensor dumps (``manifest_NNNNNN.tsv`` + ``.raw``) into the run store.

What MNN writes (``QNNTensorDumper``): per graph execution N a manifest ``manifest_%06d.tsv`` with the
header ``index name file data_type dimensions quant_encoding scale offset`` and one headerless raw file per
dumped tensor, in QNN dtype and QNN layout. This module imports one execution into the
run store; the facts it relies on live in its parts (:mod:`.dump_scan`, :mod:`.dump_checks`, :mod:`.dump_decode`,
:mod:`.dump_layout`):

- names are ``t<N>`` (entry N of the *source* ``.mnn``'s tensor-name table), ``t<N>_cast`` /
  ``t<N>_dequant`` (fp16 or dequant stages of model inputs/outputs) or ``<node>_<Stage>`` (an op's
  internal stage, node = op name with ``. / :`` replaced by ``_``);
- MNN NC4HW4 tensors are declared channel-last in QNN (``[d0, d2, …, d1]``), so they are transposed
  back to the model's layout;
- quantized tensors (SCALE_OFFSET) dequantize as ``f = (q + offset) * scale`` (QNN's sign);
- cast/dequant stages, ConvertTensor copies and pre-activation stages hold the values of a model tensor;
  each imported tensor records which (``TensorRecord.equivalent``, see :mod:`.equivalence`), and such
  tensors are brought to the layout of the tensor they stand for;
- MNN never clears the dump directory and restarts numbering at 0 each run, so files of an older,
  longer run linger: they are detected by content (raw files of execution 0 the latest manifest does not
  list, later manifests listing exactly those tensors, file names whose execution/tensor numbers disagree
  with their manifest and row) as well as by timestamps, and reported as explicit unaligned rows
  (``extra["unaligned"]``) or refused, never silently read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import BadInputError
from ..htp_fp16 import HTP_FP16_MAX, Fp16Codes
from ..progress import NULL_PROGRESS, Progress
from ..runstore import (
    InputInfo,
    ModelInfo,
    Run,
    RunRecord,
    RunWriter,
    TensorSpec,
    sha256_file,
)
from .dump_checks import refuse_damaged
from .dump_decode import read_entry
from .dump_layout import layout_for, place_entry, to_model_layout
from .dump_scan import DumpDirectory, DumpEntry, DumpExecution, find_dump_dir, scan_dump_dir, unaligned_files
from .model_reader import MnnModel, read_mnn_model
from .qnn_types import data_type


def import_mnn_dump(
    dump_dir: str | os.PathLike[str],
    *,
    mnn_model: str | os.PathLike[str] | MnnModel | None = None,
    execution: int | None = None,
    out: str | os.PathLike[str],
    force: bool = False,
    shapes: Mapping[str, Sequence[int]] | None = None,
    input_info: InputInfo | None = None,
    target: str = "mnn-dump",
    soc_model: int | None = None,
    htp_arch: int | None = None,
    warnings: Sequence[str] = (),
    extra: Mapping[str, object] | None = None,
    input_arrays: Mapping[str, np.ndarray] | None = None,
    fp16_codes: Fp16Codes = "htp",
    progress: Progress = NULL_PROGRESS,
) -> Run:
    """Import one execution of an MNN QNN dump directory into a run directory ``out``.

    ``mnn_model`` is the *source* ``.mnn`` (the one given to MNN2QNNModel, or run online): it turns ``t<N>``
    into tensor names, names the producing ops and says which tensors were channel-last. ``shapes`` (model
    tensor name → model-layout shape, e.g. from a reference run) makes the layout decision exact.
    ``input_arrays`` (the data the run was fed) are stored as graph inputs, which QNN never dumps.
    ``fp16_codes`` says how FLOAT_16 buffers encode exponent-31 codes (HTP: finite; see :mod:`qnn_debug.htp_fp16`);
    the run records how many values were read beyond ±65504 (``extra["htp_fp16"]``).
    """
    scan = scan_dump_dir(dump_dir)
    chosen = scan.execution(execution)
    refuse_damaged(scan, chosen)  # before anything is written: no run, and so no verdict, from a damaged dump
    model = _load_model(mnn_model)
    shapes = dict(shapes or {})
    if model is not None:
        for inp in model.inputs:
            if inp.name not in shapes and all(d > 0 for d in inp.shape) and inp.data_format in ("NCHW", "NC4HW4"):
                shapes[inp.name] = inp.shape
    run_warnings = list(warnings) + list(scan.problems)
    if chosen.stale:
        run_warnings.append(f"execution {chosen.number} ({chosen.manifest}) is left over from an older run")
    if model is None:
        run_warnings.append("no .mnn given: tensors keep their QNN names (t<N>) and QNN layout")
    placed = sorted(((place_entry(e, model), e) for e in chosen.entries), key=lambda pe: (pe[0].position, pe[0].order, pe[1].index))
    dtypes = {e.data_type for e in chosen.entries}
    record = RunRecord(
        role="target",
        target=target,
        precision=_precision(dtypes),
        model=model_info(model),
        inputs=input_info,
        soc_model=soc_model,
        htp_arch=htp_arch,
        outputs=[n for n in (model.output_names if model else []) if any(p.name == n for p, _ in placed)],
        extra={
            "dump_dir": scan.path,
            "execution": chosen.number,
            "manifest": chosen.manifest,
            "executions": [{"number": e.number, "manifest": e.manifest, "tensors": len(e.entries), "stale": e.stale}
                           for e in scan.executions],
            "unlisted_files": scan.unlisted_files,
            "unaligned": unaligned_files(scan, chosen),
            **dict(extra or {}),
        },
    )
    writer = RunWriter(out, record, force=force)
    used: set[str] = set()
    dumped = {p.name for p, _ in placed}
    for name, arr in (input_arrays or {}).items():
        if name not in dumped:
            writer.add_tensor(_unique(name, used), np.asarray(arr), kind="input", position=-1, label="graph input as fed")
    fp16_stats: dict[str, dict[str, int]] = {}
    with progress.stage("import MNN dump", total=len(placed)) as advance:
        for place, entry in placed:
            try:
                decoded = read_entry(scan.path, entry, fp16_codes=fp16_codes)
            except BadInputError as e:
                run_warnings.append(f"{entry.name}: {e.message} (not imported)")
                advance()
                continue
            layout = layout_for(list(decoded.values.shape), place, model, shapes)
            if layout.warning:
                run_warnings.append(layout.warning)
            values, raw = decoded.values, decoded.raw
            if layout.transpose:
                values = to_model_layout(values)
                raw = None if raw is None else to_model_layout(raw)
            label = "; ".join(x for x in (place.label, decoded.note) if x) or None
            if decoded.fp16_extended:
                fp16_stats[place.name] = {"extended": decoded.fp16_extended, "saturated": decoded.fp16_saturated}
            dt = data_type(entry.data_type)
            writer.add_tensor(
                _unique(place.name, used),
                values,
                op=place.op.name if place.op else None,
                op_type=place.op.type_name if place.op else None,
                position=place.position,
                kind=place.kind,
                label=label,
                target_name=entry.name,
                layout_note=layout.note,
                source_dtype=(dt.numpy or dt.name) if dt else str(entry.data_type),
                raw=raw,
                scale=entry.scale if raw is not None else None,
                offset=entry.offset if raw is not None else None,
                equivalent=place.equivalent,
            )
            advance()
    record.extra["htp_fp16"] = _fp16_summary(fp16_codes, fp16_stats)
    if fp16_stats:
        ext = sum(v["extended"] for v in fp16_stats.values())
        sat = sum(v["saturated"] for v in fp16_stats.values())
        run_warnings.append(f"{ext} fp16 value(s) in {len(fp16_stats)} tensor(s) lie beyond ±65504 (HTP's exponent-31 "
                            f"codes, read as finite), {sat} at the ±{HTP_FP16_MAX:g} saturation rail: "
                            + ", ".join(list(fp16_stats)[:5]))
    record.warnings = run_warnings
    return writer.finish()


def _fp16_summary(codes: Fp16Codes, stats: dict[str, dict[str, int]]) -> dict[str, object]:
    """What the run records about fp16 values beyond the IEEE range (how they were read, how many, where)."""
    return {"codes": codes, "extended_values": sum(v["extended"] for v in stats.values()),
            "saturated_values": sum(v["saturated"] for v in stats.values()),
            "tensors": dict(list(stats.items())[:50])}


def _unique(name: str, used: set[str]) -> str:
    out, n = name, 2
    while out in used:
        out, n = f"{name}#{n}", n + 1
    used.add(out)
    return out


def _load_model(model: str | os.PathLike[str] | MnnModel | None) -> MnnModel | None:
    loaded = model if model is None or isinstance(model, MnnModel) else read_mnn_model(model)
    if loaded is not None and loaded.is_qnn_plugin_model:
        raise BadInputError(
            f"{loaded.path} is an MNN2QNNModel wrapper (one QNN plugin op); its tensor table does not name t<N>",
            hint="pass the source .mnn that was given to MNN2QNNModel",
        )
    return loaded


def _precision(codes: set[int]) -> str:
    types = [data_type(c) for c in codes]
    if any(t is not None and t.fixed_point for t in types):
        return "quantized"
    if any(t is not None and t.name == "FLOAT_16" for t in types):
        return "fp16"
    return "fp32"


def model_info(model: MnnModel | None) -> ModelInfo | None:
    if model is None:
        return None
    return ModelInfo(
        path=model.path,
        sha256=sha256_file(model.path),
        format="mnn",
        inputs=[TensorSpec(name=i.name, shape=list(i.shape), dtype=i.dtype) for i in model.inputs],
        outputs=[TensorSpec(name=n, shape=[], dtype="float32") for n in model.output_names],
    )


__all__ = ["DumpDirectory", "DumpEntry", "DumpExecution", "find_dump_dir", "import_mnn_dump", "model_info", "scan_dump_dir"]
