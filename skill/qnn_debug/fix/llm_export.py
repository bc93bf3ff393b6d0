"""Fix for ``llm-check`` findings: the exact command lines for this folder, and the graph edit where there is one.

Quantization encodings on integer tensors (position ids, Gather indices, shape values) are the finding that
lives in ``llm.mnn`` itself: those ``extraTensorDescribe`` entries are removed from the flatbuffer in place
(:mod:`.mnn_describe`; the converter's JSON round trip would round every other encoding), MNN's converter must
read the edited file into the same JSON as the original minus those entries, and the edited model replaces
``llm.mnn`` atomically (the previous file kept as ``llm.mnn.previous``) only once ``llm-check`` no longer
reports the finding. Re-exporting is the other way out: its command line is built from the folder's
``export_args.json``; ``generate_llm_qnn.py`` follows either way.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from .. import fs
from ..errors import BadInputError
from ..mnn.soc import arch_for
from ..next_step import NextStep
from ..progress import Progress
from .llm_family import FINDING as FAMILY_FINDING
from .llm_family import rename_fix
from .models import FixResult, ProofCheck

GRAPH_FINDING = "quant_on_integer_tensor"
MODEL_FILE = "llm.mnn"
PREVIOUS = "llm.mnn.previous"


def is_export(path: str) -> bool:
    """An llmexport folder (holds llm.mnn / llm_config.json) or a saved ``llm-check --json`` document."""
    p = Path(path)
    if p.is_dir():
        return (p / MODEL_FILE).is_file() or (p / "llm_config.json").is_file()
    if p.is_file() and p.suffix == ".json":
        try:
            data = fs.read_json(p, what="llm-check result")
        except BadInputError:
            return False
        return isinstance(data, dict) and "findings" in data and "export_dir" in data
    return False


def export_dir_of(path: str) -> str:
    p = Path(path)
    return str(p) if p.is_dir() else str(fs.read_json(p, what="llm-check result")["export_dir"])


def commands(folder: Any, soc_model: int) -> list[str]:
    """The re-export and generate_llm_qnn.py lines for this folder (unknowns as quoted $VARS)."""
    args = folder.export_args or {}
    src = shlex.quote(str(args["path"])) if args.get("path") else '"$HF_MODEL_DIR"'
    flags = " --smooth" if args.get("smooth") else " --omni" if args.get("omni") else ""
    arch = arch_for(soc_model)
    d = shlex.quote(str(folder.dir))
    return [f"python3 llmexport.py --path {src} --export mnn --dst_path {d} --generate_for_npu{flags}",
            f"python3 generate_llm_qnn.py --model {d} --soc_id {soc_model} --dsp_arch v{arch or '$ARCH'} "
            '--mnn_path "$MNN_BUILD"']


def fix_llm_export(path: str, *, out: Path, soc_model: int, timeout: float, progress: Progress) -> FixResult:
    from ..llm.check import check_llm_export
    from ..llm.check_models import LlmCheckRequest
    from ..llm.export_reader import read_export

    export_dir = export_dir_of(path)
    folder = read_export(export_dir)
    before = check_llm_export(LlmCheckRequest(export_dir=export_dir))
    lines = commands(folder, soc_model)
    why = ("HF_MODEL_DIR: the Hugging Face model folder the export came from; MNN_BUILD: the MNN build folder with "
           "generateIO and compilefornpu")
    steps = [NextStep(tool="check_llm_export", cli=f"qnn-debug llm-check {shlex.quote(export_dir)}",
                      why="re-check the folder after the re-export or the edit")]
    ids = [f.id for f in before.findings if f.severity == "error"]
    ids_before = [f.id for f in before.findings]
    in_llm = [f for f in before.findings if f.id == GRAPH_FINDING and f.graph in (None, MODEL_FILE)]
    other_graphs = sorted({f.graph for f in before.findings if f.id == GRAPH_FINDING and f.graph not in (None, MODEL_FILE)})
    base: dict[str, Any] = dict(kind="llm_export", verdict="llm-check: " + (", ".join(ids) or "no error findings"),
                                out=str(out), commands=lines, next_steps=steps, findings_before=ids_before)
    if not in_llm and FAMILY_FINDING in ids:
        return _family_fix(folder, export_dir, soc_model, base, why)
    if not in_llm:
        return FixResult(**base, summary=f"No finding in llm.mnn itself to edit; re-export and regenerate with the "
                         f"commands below ({why}).", not_proven=["a re-export changes the model: run the commands, "
                                                                  "then llm-check and llm-text"])
    with progress.stage("fix: llm.mnn", total=None, message="fix: removing encodings of integer tensors"):
        edited, removed, checks = _edit(folder, out, timeout)
    after_dir = out / "recheck" / Path(export_dir).name  # the folder's own name: generate_llm_qnn.py reads the family from it
    _stage_folder(Path(export_dir), after_dir, edited)
    after = check_llm_export(LlmCheckRequest(export_dir=str(after_dir)))
    after_ids = [f.id for f in after.findings if f.id != "weight_file_missing"]  # the staged copy links no weights
    new = sorted(set(after_ids) - {f.id for f in before.findings})
    left = [f for f in after.findings if f.id == GRAPH_FINDING and f.graph in (None, MODEL_FILE)]
    checks.append(ProofCheck(name=f"llm-check no longer reports {GRAPH_FINDING} in {MODEL_FILE}", passed=not left
                             and not new, detail=f"findings before: {', '.join(ids_before) or 'none'}; "
                             f"after: {', '.join(after_ids) or 'none'}" + (f"; new: {', '.join(new)}" if new else "")))
    proven = all(c.passed for c in checks)
    artefact, kept = None, Path(PREVIOUS)
    if proven:  # only a proven edit replaces the user's file; the previous one is kept beside it
        model = Path(export_dir) / MODEL_FILE
        kept = _free(Path(export_dir) / PREVIOUS)
        with fs.open_new(kept, what="previous llm.mnn") as f:
            f.write(fs.read_bytes(model, what="llm.mnn"))
        fs.atomic_write_bytes(model, fs.read_bytes(edited, what="edited llm.mnn"), what="llm.mnn")
        artefact = str(model)
    summary = (f"{'Proven' if proven else 'NOT proven'}: {len(removed)} activation encoding(s) removed from integer "
               f"tensors of llm.mnn ({', '.join(removed[:6])}{'...' if len(removed) > 6 else ''})"
               + (f"; llm.mnn replaced, the previous file kept as {kept.name}" if proven else "; llm.mnn left as it was")
               + f". Then regenerate the QNN graphs with the second command below ({why})."
               + (f" Not edited: {', '.join(other_graphs)} (its integer tensors keep their encodings; re-export it "
                  "without them)." if other_graphs else ""))
    steps.append(NextStep(tool="compare_llm_text", cli=f"qnn-debug llm-text {shlex.quote(export_dir)}",
                          why="the edited model still generates on MNN's CPU runtime"))
    return FixResult(**base, summary=summary, artefact=artefact, proven=proven, proof=checks,
                     findings_after=after_ids,
                     not_proven=["the edited model's text on CPU and on the phone (llm-text; generate_llm_qnn.py then "
                                 "llm_demo): the edit only drops encodings, it is not run here"])


def _family_fix(folder: Any, export_dir: str, soc_model: int, base: dict[str, Any], why: str) -> FixResult:
    """The folder's name misleads generate_llm_qnn.py: the rename, proven on a staged copy, then the script on it."""
    model_type = str((folder.llm_config or {}).get("model_type") or "")
    target, moves, check, after_ids = rename_fix(export_dir, model_type)
    arch = arch_for(soc_model)
    gen = (f"python3 generate_llm_qnn.py --model {shlex.quote(target)} --soc_id {soc_model} "
           f"--dsp_arch v{arch or '$ARCH'} --mnn_path \"$MNN_BUILD\"")
    steps = [NextStep(tool="check_llm_export", cli=f"qnn-debug llm-check {shlex.quote(target)}",
                      why="re-check the folder under its new name")]
    summary = (f"{'Proven' if check.passed else 'NOT proven'}: generate_llm_qnn.py reads the model family from the "
               f"folder path; rename the folder to {Path(target).name} (first command), then regenerate ({why}).")
    return FixResult(**{**base, "commands": [*moves, gen], "next_steps": steps}, summary=summary,
                     proven=check.passed, proof=[check], findings_after=after_ids,
                     not_proven=["the folder is not moved here: run the mv yourself (a symlink does not do: the "
                                 "check reads the resolved path)"])


def _edit(folder: Any, out: Path, timeout: float) -> tuple[Path, list[str], list[ProofCheck]]:
    from ..llm.mnn_extras import read_mnn_extras
    from ..llm.segments import integer_tensors
    from ..mnn.model_reader import read_mnn_model
    from ..workers import run_worker
    from .mnn_describe import drop_quant_entries

    fs.make_dirs(out, what="fix output directory")
    src = Path(folder.model_path)
    model, extras = read_mnn_model(src), read_mnn_extras(src)
    drop = set(integer_tensors(model, extras)) & set(extras.encodings)
    data = fs.read_bytes(src, what="llm.mnn")
    new, removed, (lo, hi) = drop_quant_entries(data, drop)
    edited = fs.atomic_write_bytes(out / MODEL_FILE, new, what="edited llm.mnn")
    model2, extras2 = read_mnn_model(edited), read_mnn_extras(edited)
    kept_same = all(extras2.encodings.get(k) == v for k, v in extras.encodings.items() if k not in drop)
    outside = sum(a != b for a, b in zip(data[:lo] + data[hi:], new[:lo] + new[hi:], strict=True))
    same_graph = (model2.tensor_names == model.tensor_names
                  and [(o.name, o.type_id) for o in model2.ops] == [(o.name, o.type_id) for o in model.ops])
    checks = [ProofCheck(
        name="only the encodings of integer tensors are gone", passed=sorted(removed) == sorted(drop) and kept_same
        and same_graph and outside == 0 and not drop & set(extras2.encodings),
        detail=f"{len(extras.encodings)} -> {len(extras2.encodings)} encodings; the other encodings bit-identical: "
        f"{kept_same}; ops and tensor names identical: {same_graph}; bytes changed outside the describe vector: "
        f"{outside}")]

    def to_json(a: Path, b: Path) -> dict[str, Any]:
        run_worker("qnn_debug.workers.mnn_json_worker", {"src": str(a), "dst": str(b)},
                   log_path=out / f"{b.name}.log", timeout=timeout, what="MNN converter")
        doc: dict[str, Any] = fs.read_json(b, what="llm.mnn as JSON", max_bytes=1 << 31)
        return doc

    before, after = to_json(src, out / "original.json"), to_json(edited, out / "edited.json")
    before["extraTensorDescribe"] = [e for e in before.get("extraTensorDescribe") or []
                                     if not (e.get("index") in drop and "quantInfo" in e)]
    for d in (before, after):
        d.pop("mnn_uuid", None)
    checks.append(ProofCheck(name="MNN's converter reads the edited model", passed=before == after,
                             detail="its JSON of the edited llm.mnn " + ("equals" if before == after else "DIFFERS from")
                             + f" its JSON of the original without the {len(drop)} entries"))
    names = [model.tensor_name(i) or str(i) for i in sorted(drop)]
    return edited, names, checks


def _free(path: Path) -> Path:
    """``path``, or ``path2``, ``path3``... when taken: a kept previous file is never replaced."""
    candidate, n = path, 2
    while candidate.exists() or candidate.is_symlink():
        candidate, n = path.with_name(f"{path.name}{n}"), n + 1
    return candidate


def _stage_folder(src: Path, dst: Path, model: Path) -> None:
    """The export folder as it will be after the edit (small files and the edited model; not the weight file, which
    llm-check only looks for), to re-check without touching the user's folder."""
    fs.make_dirs(dst, what="re-check folder")
    for f in src.iterdir():
        if f.is_file() and f.name != MODEL_FILE and not f.name.startswith(PREVIOUS) and not f.name.endswith(".weight"):
            fs.copy_file(f, dst / f.name)
    fs.copy_file(model, dst / MODEL_FILE)
