"""The fixed ``.mnn`` the user ships, beside their own ``.mnn``: converted from the fixed ONNX the way theirs was
(the converter flags the file keeps: ``bizCode``, ``--fp16`` / ``--weightQuantBits N`` from its weights), gated on MNN CPU against the fp32 reference, then written next to
theirs atomically (a previous file is never replaced; see :func:`.output.write_next_to`).

Which ``.mnn`` is the user's: the one the comparison read, unless qnn-debug converted it itself (it sits in a run
folder), else the one the baseline gated (``--mnn-model``); with none, the new file goes beside the ONNX model.
"""

from __future__ import annotations

from pathlib import Path

from ..progress import Progress
from ..runstore import RUN_FILE
from .models import ProofCheck, ShippedMnn
from .output import write_next_to
from .source import Source

GATE_LIMIT = 0.01  # the baseline gate's relative threshold (what MNN's own ModuleBasic accepts)
NOT_READABLE = ("flags a .mnn does not record (--optimizeLevel, --keepInputFormat, --transformerFuse, ...) are the "
                "converter's defaults: re-convert by hand if you used others")


def user_mnn(source: Source) -> Path | None:
    """The user's own ``.mnn`` behind the comparison, or None."""
    given = source.result.mnn_model
    if given:
        p = Path(given)
        if p.suffix.lower() == ".mnn" and p.is_file() and not (p.parent / RUN_FILE).is_file():
            return p
    if source.baseline is not None:
        from ..baseline import load_baseline

        check = load_baseline(source.baseline).report.mnn_model
        if check is not None and Path(check.path).is_file():
            return Path(check.path)
    return None


def ship_mnn(fixed_onnx: Path, *, source: Source, onnx_model: Path, suffix: str, inputs: Path, out: Path,
             timeout: float, force: bool, progress: Progress) -> tuple[ShippedMnn, ProofCheck]:
    """Convert ``fixed_onnx``, gate it, and write ``<name>.<suffix>.mnn`` beside the user's ``.mnn`` when it passes."""
    from .. import fs
    from ..baseline import run_baseline
    from ..mnn.model_reader import read_mnn_model
    from ..mnn.weight_storage import weight_flags
    from ..workers import run_worker

    theirs = user_mnn(source)
    biz = (read_mnn_model(theirs).biz_code if theirs is not None else None) or "MNN"
    storage = weight_flags(theirs) if theirs is not None else []
    flags = ["-f", "ONNX", "--bizCode", biz, *storage]
    work = fs.make_dirs(out / "ship", what="fix output directory")
    converted = work / f"{onnx_model.stem}.{suffix}.mnn"
    with progress.stage("fix: ship .mnn", total=None, message="fix: converting the fixed model to .mnn"):
        run_worker("qnn_debug.workers.mnn_convert_worker", {"src": str(fixed_onnx), "dst": str(converted),
                                                             "biz_code": biz, "flags": storage},
                   log_path=work / "convert.log", timeout=timeout, what="MNN converter")
    base = run_baseline(fixed_onnx, work / "gate", inputs=inputs, force=force, mnn_gate=False, mnn_model=converted,
                        progress=progress)
    check = base.report.mnn_model
    gate = check.gate if check is not None else None
    err = gate.max_rel_error if gate is not None else None
    # fp32 weights: the baseline's own gate (a tenth of the fp16 floor); weights stored in fp16 or quantized as the
    # user's were differ from the fp32 reference by their storage, so there only ModuleBasic's 1 % applies
    passed = gate is not None and err is not None and err <= GATE_LIMIT and (gate.status == "passed" or bool(storage))
    beside = theirs if theirs is not None else onnx_model.with_suffix(".mnn")
    storage_words = f", weights {' '.join(storage)}" if storage else ", fp32 weights"
    origin = (f"converted as {theirs.name} was (bizCode {biz!r}{storage_words}, read from it)" if theirs is not None else
              f"no .mnn of yours is known (pass the comparison of your .mnn, or baseline --mnn-model), so it goes "
              f"beside {onnx_model.name}, converted with bizCode {biz!r}")
    limit = (f"limit {GATE_LIMIT:g}, weights stored {' '.join(storage)} as yours" if storage else
             f"limit {GATE_LIMIT:g}; gate {gate.status if gate else 'not run'}")
    detail = (f"the .mnn converted from the fixed model on MNN CPU fp32 against the ONNX Runtime reference: max "
              f"relative error {'n/a' if err is None else f'{err:.2g}'} ({limit})")
    path = None
    if passed:
        path = write_next_to(beside, suffix, converted.read_bytes())
    shipped = ShippedMnn(path=str(path) if path else None, beside=str(theirs) if theirs else None,
                         converter_flags=flags, origin=origin, not_from_file=NOT_READABLE, gate=detail,
                         gate_passed=passed)
    proof = ProofCheck(name="the shipped .mnn matches the reference on MNN CPU", passed=passed,
                       detail=detail + ("" if passed else "; nothing written beside your .mnn"))
    return shipped, proof
