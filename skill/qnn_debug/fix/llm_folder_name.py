"""Fix for a folder-name finding of ``llm-check``: a link to the folder under a name that states the model family.

Why: generate_llm_qnn.py guesses the family from its ``--model`` string (Qwen-VL from 'Qwen' and 'VL', Qwen3.5 from
'Qwen3.5'), so a renamed export gets the wrong IO configs, or ``ValueError: Unsupported visual model``. A link under
the right name leaves the user's folder as it is (the script writes ``qnn/`` and ``config_qnn.json`` through it) and is
proven here by ``llm-check`` on the link's path as given. For a VL export whose encoder returns deepstack features the
script's visual IO config keeps only ``image_embeds``: the config with both outputs is written as a JSON file for
``--input_json``. Every value the command lines fill in says where it comes from (a default, a placeholder, the folder).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from .. import fs
from ..mnn.soc import DEFAULT_SOC, arch_for, default_soc_help
from ..next_step import NextStep
from .models import FixResult, ProofCheck

FOLDER_FINDINGS = frozenset({"family_from_folder_name", "vl_io_config_mismatch"})
VISUAL_IO = "visual_io.json"
# the name prefix generate_llm_qnn.py reads each family from (makeIOJson / makeVLIOJson at MNN 4d40bdb)
FAMILY_PREFIX = {"qwen3_vl": "Qwen3-VL", "qwen3_vl_moe": "Qwen3-VL", "qwen2_5_vl": "Qwen2.5-VL", "qwen2_vl": "Qwen2-VL",
                 "qwen3_5": "Qwen3.5"}
_FAMILY_WORDS = re.compile(r"Qwen3\.5|VL")  # the words the script tests (case-sensitive, as it does)
SCRIPT_DEFAULT_SIZE = "512x512"  # generate_llm_qnn.py's --image_sizes default


def needs_folder_fix(findings: list[Any]) -> bool:
    return any(f.id in FOLDER_FINDINGS for f in findings)


def link_name(model_type: str | None, name: str) -> str:
    """The folder's name with the family words generate_llm_qnn.py reads put right: the family's prefix for a VL or
    Qwen3.5 model, none of those words for a text model."""
    rest = re.sub(r"[-_. ]{2,}", "-", _FAMILY_WORDS.sub("", name)).strip("-_. ") or "export"
    prefix = FAMILY_PREFIX.get((model_type or "").lower())
    return f"{prefix}-{rest}" if prefix else rest


def fix_folder_name(export_dir: str, before: Any, *, out: Path, soc_model: int, base: dict[str, Any]) -> FixResult:
    """Link the folder under a name that states its family in ``out``, re-check it there, write the visual IO JSON a
    VL encoder with deepstack features needs, and the generate_llm_qnn.py lines for the link."""
    from ..llm.check import check_llm_export
    from ..llm.check_models import LlmCheckRequest
    from ..llm.check_vl import visual_io_configs

    real = Path(fs.check(export_dir, what="export folder", kind="dir"))
    fs.make_dirs(out, what="fix output directory")
    link = _link(real, out / link_name(before.settings.model_type, Path(export_dir).name))
    after = check_llm_export(LlmCheckRequest(export_dir=str(link)))
    ids_before = [f.id for f in before.findings]
    after_ids = [f.id for f in after.findings]
    left = sorted({f.id for f in after.findings} & FOLDER_FINDINGS)
    checks = [ProofCheck(name="llm-check under the linked name no longer reports the folder-name findings",
                         passed=not left, detail=f"findings before: {', '.join(ids_before) or 'none'}; after, at "
                         f"{link}: {', '.join(after_ids) or 'none'}" + (f"; still: {', '.join(left)}" if left else ""))]
    soc_note = (f"--soc_id {soc_model} --dsp_arch v{arch_for(soc_model) or '$ARCH'}: "
                + (f"qnn-debug's default SoC ({default_soc_help()}), not read from your phone: give fix --soc N for "
                   "yours (generate_llm_qnn.py itself has no default for either)" if soc_model == DEFAULT_SOC
                   else f"from --soc {soc_model}"))
    arch = arch_for(soc_model)
    common = (f"--model {shlex.quote(str(link))} --soc_id {soc_model} --dsp_arch v{arch or '$ARCH'} "
              '--mnn_path "$MNN_BUILD"')
    commands = [f"python3 generate_llm_qnn.py {common}"]
    family = FAMILY_PREFIX.get((before.settings.model_type or "").lower())
    named = f"a name that states the family ('{family}')" if family else "a name free of 'VL' and 'Qwen3.5' (a text model)"
    notes = [f"--model {link}: a link to {real} under {named}; generate_llm_qnn.py reads the family from this "
             "string and writes qnn/ and config_qnn.json through the link into your folder",
             soc_note,
             '--mnn_path "$MNN_BUILD": set MNN_BUILD to your MNN build folder (generateIO, compilefornpu); it must sit '
             "in the MNN checkout (npu_convert.py is found at <mnn_path>/../source/backend/qnn)"]
    artefacts = [str(link)]
    v = after.visual
    if v is not None:
        sizes = v.image_sizes or [(512, 512)]
        size_text = ",".join(f"{w}x{h}" for w, h in sizes)
        default_size = size_text == SCRIPT_DEFAULT_SIZE
        size_note = (f"image sizes {size_text}: " + ("generate_llm_qnn.py's default --image_sizes; list every size "
                     "your app feeds (e.g. 448x448,640x480): the encoder is compiled per size" if default_size
                     else "as checked by llm-check"))
        configs = visual_io_configs(str(link), list(sizes))
        keeps_all = isinstance(configs, list) and all(set(v.outputs) <= set(c["outputs"]) for c in configs)
        if isinstance(configs, list) and len(v.outputs) > 1 and not keeps_all:
            # generate_llm_qnn.py's input.json layout (makeVLIOJson), with every output of the encoder kept
            feeds = [[{"name": n, "shape": list(shape)} for n, shape in c["inputs"].items()] for c in configs]
            script = [{"inputs": f, "outputs": list(v.outputs)} for f in feeds]
            written = fs.atomic_write_text(out / VISUAL_IO, fs.strict_json({"configs": script}, indent=2),
                                           what="visual IO config")
            artefacts.append(str(written))
            fed = all({i["name"] for i in f} == set(v.inputs) for f in feeds)
            checks.append(ProofCheck(
                name="the visual IO JSON feeds every visual.mnn input and keeps every output", passed=fed,
                detail=f"{written}: inputs {[i['name'] for i in feeds[0]]} against visual.mnn "
                f"{list(v.inputs)}; outputs {list(v.outputs)} (generate_llm_qnn.py's own config keeps "
                "image_embeds only, which cuts the deepstack mergers away)"))
            commands.append(f"python3 generate_llm_qnn.py {common} --model_name visual.mnn --external_file "
                            f"visual.mnn.weight --input_json {shlex.quote(str(written))} --reuse_config_qnn_json")
            notes += [f"{VISUAL_IO}: {size_note}",
                      "--input_json writes no config_qnn.json entry for the encoder: add \"visual_model\": "
                      "\"qnn/visual.mnn\" to config_qnn.json after that run (a plain --model_name visual.mnn run adds "
                      "it, but compiles the encoder without its deepstack output)"]
        else:
            commands.append(f"python3 generate_llm_qnn.py {common} --model_name visual.mnn --image_sizes {size_text} "
                            "--reuse_config_qnn_json")
            notes.append(f"--image_sizes {size_text}: {size_note}")
    proven = all(c.passed for c in checks)
    summary = (f"{'Proven' if proven else 'NOT proven'}: linked {real.name} as {link.name} (your folder is left as it "
               f"is); llm-check under that name " + ("reports no folder-name finding" if not left else
               f"still reports {', '.join(left)}") + (f"; the visual IO config with both outputs is in {VISUAL_IO} (what "
               "vl_deepstack_output_dropped asks for: give it with --input_json)" if len(artefacts) > 1 else "") + ". Then run the generate_llm_qnn.py line(s) below on the link.")
    steps = [NextStep(tool="check_llm_export", cli=f"qnn-debug llm-check {shlex.quote(str(link))}",
                      why="the folder under the linked name, as generate_llm_qnn.py will read it")]
    return FixResult(**base, next_steps=steps, summary=summary, artefact=str(link), proven=proven,
                     proof=checks, commands=commands, command_notes=notes, findings_after=after_ids,
                     not_proven=["generate_llm_qnn.py, the QNN graphs and the phone run are not run here: run the "
                                 "lines below, then llm-text (CPU) and llm_demo (phone)"])


def _link(target: Path, wanted: Path) -> Path:
    """A symlink to ``target`` at ``wanted`` (or ``wanted2``... when the name is taken by something else)."""
    candidate, n = wanted, 2
    while os.path.lexists(candidate):
        if candidate.is_symlink() and Path(os.path.realpath(candidate)) == target:
            return candidate
        candidate, n = wanted.with_name(f"{wanted.name}{n}"), n + 1
    fs.real_path(candidate, what="link")  # confined to the allowed roots like every file written
    os.symlink(target, candidate, target_is_directory=True)
    return candidate
