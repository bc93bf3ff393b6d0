"""Fix for ``family_from_folder_name``: the folder name generate_llm_qnn.py reads the right model family from.

The script guesses the family from the ``--model`` path string ('Qwen3.5' → Qwen3.5, 'Qwen' and 'VL' → Qwen-VL),
so a renamed export gets the wrong IO configs. The fix is a name, proven on a staged copy of the folder's small
files under that name in a private temp folder (whose own path names no family), never by moving the user's folder.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .. import fs
from .models import ProofCheck

FINDING = "family_from_folder_name"
_VL_PREFIX = {"qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL", "qwen3_vl": "Qwen3-VL", "qwen3_vl_moe": "Qwen3-VL"}


def family_name(model_type: str, name: str) -> str:
    """``name`` changed as little as possible so that the script's guess matches ``model_type``."""
    mt = model_type.lower()
    if mt.startswith("qwen3_5"):
        return name if "Qwen3.5" in name else f"Qwen3.5-{name}"
    if mt in _VL_PREFIX:
        return name if "Qwen" in name and "VL" in name else f"{_VL_PREFIX[mt]}-{name}"
    plain = name.replace("Qwen3.5", "Qwen3-5").replace("VL", "").strip("-_.") or "model"
    return plain


def rename_fix(export_dir: str, model_type: str) -> tuple[str, list[str], ProofCheck, list[str]]:
    """(new folder path, the commands, the proof that llm-check no longer reports the finding on that name, the
    findings llm-check reports there)."""
    from ..llm.check import check_llm_export
    from ..llm.check_models import LlmCheckRequest

    src = Path(export_dir).resolve()
    new_name = family_name(model_type, src.name)
    target = src.parent / new_name
    with fs.scratch("qnn-debug-family-") as tmp:
        staged = fs.make_dirs(Path(tmp) / new_name, what="re-check folder")
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith(".weight"):
                fs.copy_file(f, staged / f.name)
        after = check_llm_export(LlmCheckRequest(export_dir=str(staged)))
        left = [f.id for f in after.findings if f.id == FINDING]
        after_ids = [f.id for f in after.findings if f.id != "weight_file_missing"]
        rest = sorted({f.id for f in after.findings if f.severity == "error" and f.id != "weight_file_missing"})
    check = ProofCheck(name=f"llm-check no longer reports {FINDING} under the name {new_name}", passed=not left,
                       detail=f"staged copy named {new_name}: error findings left: {', '.join(rest) or 'none'}")
    cmds = [f"mv {shlex.quote(str(src))} {shlex.quote(str(target))}"]
    return str(target), cmds, check, after_ids
