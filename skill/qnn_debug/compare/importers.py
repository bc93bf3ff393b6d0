"""Open what the user points ``compare`` at: a baseline or run as REFERENCE; a run, an MNN QNN dump
directory or an ``.npz`` as TARGET. Every TARGET ends up as a :class:`~qnn_debug.runstore.Run`, so the
rest of the comparison never cares where tensors came from.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInputError
from ..htp_fp16 import Fp16Codes
from ..progress import NULL_PROGRESS, Progress
from ..runstore import FLOOR_DIR, REFERENCE_DIR, RUN_FILE, Run, RunRecord, RunWriter, load_run


@dataclass
class ReferenceSide:
    """The trusted side of a comparison: the fp32 reference and, when known, the fp16 floor."""

    reference: Run
    floor: Run | None
    baseline_dir: Path | None


def open_reference(path: str | Path) -> ReferenceSide:
    """A baseline directory (``reference/`` + ``fp16_floor/``) or a single run directory."""
    p = Path(path)
    if not p.exists():
        raise BadInputError(f"reference {p} does not exist", hint="pass a baseline directory from `qnn-debug baseline`")
    if p.is_dir() and (p / REFERENCE_DIR / RUN_FILE).exists():
        floor_dir = p / FLOOR_DIR
        floor = load_run(floor_dir) if (floor_dir / RUN_FILE).exists() else None
        return ReferenceSide(load_run(p / REFERENCE_DIR), floor, p)
    if p.is_dir() and (p / RUN_FILE).exists():
        run = load_run(p)
        sibling = p.parent / FLOOR_DIR
        floor = load_run(sibling) if run.record.role == "reference" and (sibling / RUN_FILE).exists() else None
        return ReferenceSide(run, floor, p.parent if floor is not None else None)
    raise BadInputError(
        f"{p} is neither a baseline directory (with {REFERENCE_DIR}/) nor a run directory (with {RUN_FILE})",
        hint="run `qnn-debug baseline MODEL --out DIR` and pass DIR",
    )


def target_kind(path: str | Path) -> str:
    """``run``, ``mnn-dump`` or ``npz``; raises for anything else."""
    p = Path(path)
    if not p.exists():
        raise BadInputError(f"target {p} does not exist", hint="pass a run directory, an MNN dump directory or an .npz")
    if p.is_file() and p.suffix == ".npz":
        return "npz"
    if p.is_dir() and (p / REFERENCE_DIR / RUN_FILE).exists():
        # Refused rather than silently swapped for its reference/: comparing two baselines is rarely what
        # was meant, and when it is, naming the run says which of its runs is compared.
        raise BadInputError(
            f"{p} is a baseline directory; pass {p / REFERENCE_DIR} (or a dump run) as TARGET",
            hint=f"a baseline holds {REFERENCE_DIR}/, {FLOOR_DIR}/ and baseline.json; TARGET is one run: "
                 f"`qnn-debug compare REFERENCE {p / REFERENCE_DIR}`",
        )
    if p.is_dir() and (p / RUN_FILE).exists():
        return "run"
    if p.is_dir() and any(p.glob("manifest_*.tsv")):
        return "mnn-dump"
    if p.is_dir() and (p / "tensors").is_dir():
        return "run"  # load_run explains that it did not finish
    raise BadInputError(
        f"{p} is not a run directory, an MNN QNN dump directory (manifest_*.tsv) or an .npz file",
        hint="pass the --out of `qnn-debug dump`, MNN's qnn_intermediate_outputs/ directory, or an .npz of tensors",
    )


def open_target(path: str | Path, *, reference: Run, work_dir: Path, mnn_model: Path | None = None,
                execution: int | None = None, progress: Progress = NULL_PROGRESS,
                fp16_codes: Fp16Codes = "htp") -> tuple[Run, str]:
    """Load TARGET as a run; npz files and MNN dumps are imported into ``work_dir`` first."""
    kind = target_kind(path)
    p = Path(path)
    if kind == "run":
        return load_run(p), kind
    if kind == "npz":
        return import_npz(p, reference=reference, out=work_dir, progress=progress), kind
    return import_mnn(p, reference=reference, out=work_dir, mnn_model=mnn_model, execution=execution,
                      progress=progress, fp16_codes=fp16_codes), kind


def import_mnn(dump_dir: Path, *, reference: Run, out: Path, mnn_model: Path | None, execution: int | None,
               progress: Progress = NULL_PROGRESS, fp16_codes: Fp16Codes = "htp") -> Run:
    """Read an MNN QNN dump directory with the project's MNN dump reader (reference shapes fix layouts)."""
    from ..mnn.dump_reader import import_mnn_dump

    shapes = {t.name: t.shape for t in reference.tensors}
    return import_mnn_dump(dump_dir, mnn_model=mnn_model, execution=execution, out=out, force=True,
                           shapes=shapes, progress=progress, fp16_codes=fp16_codes)


def import_npz(path: Path, *, reference: Run, out: Path, progress: Progress = NULL_PROGRESS) -> Run:
    """Turn an ``.npz`` keyed by model tensor names (model layout) into a run, one array at a time.

    Ops and positions come from the reference's records, so the npz needs nothing but names and values.
    """
    # an array may be at most as big as the reference tensor it stands for (in float64), so a zip bomb
    # or a mislabelled archive is refused before anything is decompressed or written
    sizes = {t.name: 8 * _count(t.shape) for t in reference.tensors}
    with _open_npz(path, sizes) as npz:
        names = list(npz.files)
        if not names:
            raise BadInputError(f"{path} holds no arrays", hint="save tensors with numpy.savez(path, **{name: array})")
        record = RunRecord(role="imported", target="npz", precision="unknown",
                           extra={"source": str(path)})
        writer = RunWriter(out, record, force=True)
        with progress.stage("import npz", total=len(names)) as advance:
            for name in names:
                try:
                    arr = npz[name]
                except (ValueError, OSError, zipfile.BadZipFile, zlib.error, EOFError) as e:
                    raise BadInputError(f"array {name!r} in {path} is unreadable: {e}",
                                        hint="save plain numeric arrays (no objects) with numpy.savez") from None
                if arr.dtype.kind not in "biuf":
                    raise BadInputError(f"array {name!r} in {path} has dtype {arr.dtype}, not numbers",
                                        hint="save numeric arrays only")
                ref = reference.info(name) if reference.has(name) else None
                writer.add_tensor(
                    name, arr,
                    op=ref.op if ref else None, op_type=ref.op_type if ref else None,
                    position=ref.position if ref else 10**9, kind=ref.kind if ref else "activation",
                )
                advance()
        if any(t.source_dtype == "float16" for t in record.tensors):
            record.precision = "fp16"
        from .observer import observer_effect

        outputs = [o for o in reference.record.outputs if o in names]
        record.observer_effect_db, record.extra["observer_effect"] = observer_effect(path, npz, outputs)
        return writer.finish()


def _count(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 1)
    return n


def _open_npz(path: Path, sizes: dict[str, int]) -> Any:
    import numpy as np

    from ..npz_safe import kind_of, open_npz

    kind = kind_of(path)
    if kind != "npz":
        raise BadInputError(f"{path} holds a single array, not named tensors" if kind == "npy"
                            else f"{path} is not a readable .npz file", hint="save tensors with numpy.savez(path, **{name: array})")
    loaded = open_npz(path, max_member_bytes=max(sizes.values(), default=1 << 20) + (1 << 16), expected_bytes=sizes)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise BadInputError(f"{path} holds a single array, not named tensors",
                            hint="save tensors with numpy.savez(path, **{name: array})")
    return loaded
