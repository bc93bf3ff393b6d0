"""``llm-check`` for vision-language exports: what generate_llm_qnn.py and MNN's runtime do with ``visual.mnn``.

A VL folder goes through generate_llm_qnn.py twice (``--model_name llm.mnn`` and ``--model_name visual.mnn
--image_sizes WxH,...``); both IO configs are chosen from the ``--model`` path string, and generateIO loads
each model with exactly the names the config lists. This module computes those two configs the way the
script does and holds them against the inputs/outputs the two graphs declare, checks the image sizes against
the runtime's resize rule, and checks the files and settings the runtime reads (``visual_model``,
``has_deepstack``, the encoder's input order). The graphs' own op and encoding checks are ``check.py``'s, run on
``visual.mnn`` as on ``llm.mnn``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BadInputError
from ..mnn.model_reader import MnnModel
from ..next_step import Var, command_line
from . import sources as S
from .check_models import Finding, IoRow
from .export_reader import ExportFolder

VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
QWEN3_VISUAL_INPUTS = ["patches", "position_ids", "attention_mask", "idx_tensor", "weight_tensor"]
QWEN3_MIN_PIXELS, QWEN3_MAX_PIXELS = 65536, 16777216  # the runtime's Qwen3-VL defaults
CHUNK = 128  # generate_llm_qnn.py's default --chunk_size (shapes here are compared by rank and fixed dims)
DEFAULT_IMAGE_SIZES = [(512, 512)]  # generate_llm_qnn.py's default --image_sizes


def is_vl(folder: ExportFolder) -> bool:
    llm = folder.llm_config or {}
    return bool(llm.get("is_visual")) or str(llm.get("model_type", "")).lower() in VL_MODEL_TYPES[:4] \
        or "visual.mnn" in folder.files


def script_path(folder: ExportFolder) -> str:
    """The folder's path as generate_llm_qnn.py would read it: as given (links kept), not where links lead."""
    return folder.given_dir or folder.dir


def visual_model_path(folder: ExportFolder) -> Path:
    """Where the runtime looks for the encoder: ``visual_model`` in config.json, default ``visual.mnn``."""
    rel = str((folder.config or {}).get("visual_model", "visual.mnn"))
    return Path(folder.dir) / rel


def parse_image_sizes(text: str) -> list[tuple[int, int]]:
    """``WxH[,WxH...]`` as generate_llm_qnn.py's --image_sizes (typed error for what the script would reject)."""
    out: list[tuple[int, int]] = []
    for part in (s.strip() for s in text.split(",")):
        w, sep, h = part.partition("x")
        if not sep or not w.strip().isdigit() or not h.strip().isdigit() or int(w) <= 0 or int(h) <= 0:
            raise BadInputError(f"image size {part!r} is not WxH", hint="pass --image-sizes like 448x448,640x480 "
                                "(the value you give generate_llm_qnn.py --image_sizes)")
        out.append((int(w), int(h)))
    return out


def visual_io_configs(path: str, sizes: list[tuple[int, int]]) -> list[dict[str, Any]] | str:
    """``makeVLIOJson``'s configs for this path, or the error it raises."""
    configs: list[dict[str, Any]] = []
    for w, h in sizes:
        if "Qwen2.5" in path and "VL" in path:
            gh, gw = (round(h / 28) * 28) // 14, (round(w / 28) * 28) // 14
            seq = gh * gw
            inputs = {"patches": [seq, 1176], "position_ids": [2, seq], "attention_mask": [2, 1, seq, seq],
                      "window_index": [seq // 4]}
        elif "Qwen3" in path:
            gh, gw = (round(h / 32) * 32) // 16, (round(w / 32) * 32) // 16
            seq = gh * gw
            inputs = {"patches": [seq, 1536], "position_ids": [2, seq], "attention_mask": [1, seq, seq],
                      "idx_tensor": [4, seq], "weight_tensor": [4, seq]}
        elif "FastVLM" in path:
            inputs = {"input_images": [1, 3, h, w]}
        else:
            return f"Unsupported visual model: {path}"
        configs.append({"inputs": inputs, "outputs": ["image_embeds"]})
    return configs


def llm_io_config(path: str, hidden: int, seq: int = CHUNK) -> dict[str, list[int]]:
    """``makeIOJson``'s prefill inputs for this path (logits_index aside)."""
    inputs = {"input_ids": [seq, 1, hidden], "attention_mask": [1, 1, seq, seq], "position_ids": [1, seq]}
    if "Qwen3.5" in path:
        inputs.update(attention_mask=[2, 1, seq, seq, 3], position_ids=[3, seq])
    if "Qwen" in path and "VL" in path:
        inputs.update(position_ids=[3, seq], deepstack_embeds=[3, 1, 1])
    return inputs


def _compatible(cfg: list[int], declared: list[int]) -> bool:
    if len(cfg) != len(declared):
        return False
    return all(d < 0 or d == c or (d == 1 and c != 1 and k == 0) for k, (c, d) in enumerate(zip(cfg, declared, strict=True)))


def _rows(graph: str, cfg: dict[str, list[int]], model: MnnModel, fixed: dict[str, int]) -> list[IoRow]:
    """Compare by name; a declared dimension counts only where it is fixed (``fixed``: axis that must match)."""
    declared = {i.name: list(i.shape) for i in model.inputs}
    rows: list[IoRow] = []
    for name in dict.fromkeys([*cfg, *declared]):
        c, d = cfg.get(name), declared.get(name)
        problem = None
        if c is None:
            problem = "the graph takes it, the IO config does not feed it"
        elif d is None:
            problem = "the IO config feeds it, the graph has no such input"
        elif len(c) != len(d):
            problem = f"rank {len(c)} in the IO config, {len(d)} in the graph"
        elif name in fixed and d[fixed[name]] > 0 and c[fixed[name]] != d[fixed[name]]:
            problem = f"axis {fixed[name]} is {c[fixed[name]]} in the IO config, {d[fixed[name]]} in the graph"
        rows.append(IoRow(graph=graph, name=name, io_config=c, declared=d, problem=problem))
    return rows


def _mismatch_finding(rows: list[IoRow], graph: str, path: str, folder: ExportFolder, extra: list[str]) -> list[Finding]:
    bad = [r for r in rows if r.problem]
    if not bad:
        return []
    step_flag = "--model_name visual.mnn --image_sizes ..." if graph == "visual.mnn" else "--model_name llm.mnn"
    return [Finding(
        id="vl_io_config_mismatch", graph=graph, step=1, severity="error",
        title=f"generate_llm_qnn.py ({step_flag}) would write an IO config that does not fit {graph}",
        evidence=[*extra, *(f"{r.name}: IO config {r.io_config}, {graph} declares {r.declared}: {r.problem}" for r in bad),
                  f"--model path as the script sees it: {path}"],
        consequence=("generateIO loads the model with exactly the config's names and shapes: a name the graph lacks "
                     "fails the load ('generateIO failed'), an input the config lacks is never fed, a wrong row count "
                     "(1-row ids to a 3-row M-RoPE graph) makes the test inputs and the compiled QNN graphs wrong"),
        remedy=("give generate_llm_qnn.py a --model path that names the family as the graphs were exported "
                "('Qwen' and 'VL' for Qwen-VL, 'Qwen3' for a Qwen3-VL encoder): rename or symlink the folder, e.g. "
                "Qwen3-VL-2B-Instruct-MNN"),
        how_to_see=f"`{command_line(['llm-check', folder.dir])}` lists both graphs' inputs against both configs; "
                   "generate_llm_qnn.py writes the config to <cache_path>/input.json",
        sources=[r.cite() for r in (S.VL_LLM_IO if graph == "llm.mnn" else S.VL_VISUAL_IO, S.GENERATEIO_NAMES,
                                    S.FAMILY_GUESS)])]


def _llm_io(folder: ExportFolder, llm: MnnModel, path: str) -> tuple[list[IoRow], list[Finding]]:
    hidden = int((folder.llm_config or {}).get("hidden_size") or 0)
    cfg = llm_io_config(path, hidden or 1)
    rows = _rows("llm.mnn", cfg, llm, {"position_ids": 0, "deepstack_embeds": 0, "input_ids": 2} if hidden else
                 {"position_ids": 0, "deepstack_embeds": 0})
    rows = [r for r in rows if r.name != "logits_index"]
    return rows, _mismatch_finding(rows, "llm.mnn", path, folder, [])


def _visual_io(folder: ExportFolder, visual: MnnModel, path: str, sizes: list[tuple[int, int]]) -> tuple[list[IoRow], list[Finding]]:
    configs = visual_io_configs(path, sizes)
    if isinstance(configs, str):
        return [], [Finding(
            id="vl_io_config_mismatch", graph="visual.mnn", step=1, severity="error",
            title="generate_llm_qnn.py --model_name visual.mnn stops: it cannot tell the encoder family from the path",
            evidence=[f"makeVLIOJson raises ValueError({configs!r})",
                      f"visual.mnn inputs: {[i.name for i in visual.inputs]}"],
            consequence="no visual IO config, no test dir, no visual QNN graphs: the image path never reaches the NPU",
            remedy="run it with a --model path holding 'Qwen3' (Qwen3-VL) or 'Qwen2.5' and 'VL': rename or symlink the folder",
            sources=[S.VL_VISUAL_IO.cite(), S.FAMILY_GUESS.cite()])]
    rows = _rows("visual.mnn", configs[0]["inputs"], visual, {"patches": 1, "position_ids": 0, "idx_tensor": 0,
                                                              "weight_tensor": 0})
    findings = _mismatch_finding(rows, "visual.mnn", path, folder, [])
    extra_out = [o for o in visual.output_names if o not in configs[0]["outputs"]]
    if "deepstack_feature" in extra_out or (len(visual.output_names) > 1 and extra_out):
        findings.append(Finding(
            id="vl_deepstack_output_dropped", graph="visual.mnn", step=4, severity="warning",
            title="the visual IO config keeps only image_embeds: the compiled encoder loses its deepstack output",
            evidence=[f"visual.mnn outputs: {visual.output_names}", f"makeVLIOJson outputs: {configs[0]['outputs']}"],
            consequence=("generateIO loads the encoder with the listed outputs only (its testdir output.mnn then holds "
                         "image_embeds alone; measured with generateIO), and compilefornpu builds from that test dir, so "
                         "the deepstack mergers are cut away; on the phone the encoder returns one output, the runtime "
                         "then takes no deepstack features and the decoder's early layers get zeros at the image tokens: "
                         "image answers drift from the CPU's while text-only prompts match (the phone side inferred from "
                         "source, not measured on a device)"),
            remedy=("write the visual IO config yourself with outputs ['image_embeds', 'deepstack_feature'] and run "
                    "generate_llm_qnn.py --model_name visual.mnn --external_file visual.mnn.weight --input_json <it> "
                    "(that path converts exactly the given config); or accept the loss and compare image prompts on "
                    "CPU and NPU"),
            how_to_see="compare an image prompt and a text-only prompt with `qnn-debug llm-text` (CPU vs phone): only "
                       "the image prompt diverges",
            sources=[r.cite() for r in (S.VL_VISUAL_IO, S.GENERATEIO_NAMES, S.DEEPSTACK_OUTPUT, S.TEXT_DEEPSTACK)]))
    return rows, findings


def _runtime(folder: ExportFolder, llm: MnnModel, visual: MnnModel | None) -> list[Finding]:
    """What MNN's LLM runtime reads: has_deepstack / is_mrope against the graphs, the encoder's input order."""
    cfg = folder.llm_config or {}
    out: list[Finding] = []
    names = {i.name: list(i.shape) for i in llm.inputs}
    ev: list[str] = []
    if cfg.get("has_deepstack") and "deepstack_embeds" not in names:
        ev.append("llm_config.json has_deepstack = true, llm.mnn has no deepstack_embeds input")
    if "deepstack_embeds" in names and not cfg.get("has_deepstack"):
        ev.append("llm.mnn takes deepstack_embeds, llm_config.json has no has_deepstack = true: the runtime never feeds it")
    rows = names.get("position_ids", [0])[0]
    if cfg.get("is_mrope") and rows not in (3, -1):
        ev.append(f"llm_config.json is_mrope = true (3 position rows), llm.mnn position_ids declares {names.get('position_ids')}")
    if visual is not None and cfg.get("has_deepstack") and len(visual.output_names) < 2:
        ev.append(f"has_deepstack = true but visual.mnn returns only {visual.output_names}: no deepstack features exist")
    if ev:
        out.append(Finding(
            id="vl_runtime_inputs", graph="llm.mnn", step=4, severity="error",
            title="MNN's LLM runtime would feed llm.mnn inputs it does not have (or skip ones it needs)",
            evidence=ev,
            consequence=("with has_deepstack the runtime loads llm.mnn with a deepstack_embeds input and fails to load "
                         "a graph without it; a graph that takes one but is never fed it, or 1-row position ids for a "
                         "3-row M-RoPE graph, runs on wrong inputs"),
            remedy="re-export with llmexport.py (it writes llm_config.json and both graphs together); do not mix files of two exports",
            sources=[r.cite() for r in (S.HAS_DEEPSTACK, S.LLM_DEEPSTACK_INPUT, S.TEXT_DEEPSTACK, S.DEEPSTACK_OUTPUT)]))
    if visual is not None and str(cfg.get("model_type", "")).startswith("qwen3_vl"):
        order = [i.name for i in visual.inputs]
        if len(order) != 5 or order[3] != "idx_tensor":
            out.append(Finding(
                id="vl_encoder_not_recognised", graph="visual.mnn", step=4, severity="error",
                title="the runtime will not treat visual.mnn as a Qwen3-VL encoder",
                evidence=[f"visual.mnn inputs in order: {order}", f"expected: {QWEN3_VISUAL_INPUTS}"],
                consequence=("the runtime recognises Qwen3-VL by five inputs with idx_tensor fourth; otherwise it cuts "
                             "14-px patches and feeds no idx/weight tensors: wrong patch rows or a failed forward"),
                remedy="re-export visual.mnn with llmexport.py (Qwen3Vision.export names and orders the five inputs)",
                sources=[S.QWEN3VL_DETECT.cite()]))
    return out


def _image_sizes(folder: ExportFolder, sizes: list[tuple[int, int]], path: str, assumed: bool) -> tuple[list[int], list[Finding]]:
    cfg = folder.llm_config or {}
    lo = int(cfg.get("image_min_pixels", QWEN3_MIN_PIXELS))
    hi = int(cfg.get("image_max_pixels", QWEN3_MAX_PIXELS))
    unit = int(cfg.get("image_size_unit", 32))
    notes: list[Finding] = []
    if assumed:
        notes.append(Finding(
            id="vl_image_sizes_unknown", graph="visual.mnn", severity="info",
            title="the visual QNN graphs are compiled per image size: checked the script's default 512x512, pass "
                  "--image-sizes to check yours",
            evidence=[f"the runtime resizes each image to multiples of {unit} px between {lo} and {hi} pixels"],
            consequence=("each --image_sizes WxH becomes one fixed-shape encoder graph; an image the runtime resizes "
                         "to any other size has no compiled graph"),
            remedy=(f"run `{command_line(['llm-check', folder.dir, '--image-sizes', Var('IMAGE_SIZES', '')])}` with "
                    "IMAGE_SIZES set to the --image_sizes you give generate_llm_qnn.py (e.g. 448x448,640x480)"),
            sources=[S.VL_VISUAL_IO.cite(), S.IMAGE_RESIZE.cite(), S.VL_CONVERT_VISUAL.cite()]))
    seqs: list[int] = []
    ev: list[str] = []
    for w, h in sizes:
        rw, rh = round(w / unit) * unit, round(h / unit) * unit
        seq = (rh // 16) * (rw // 16) if "Qwen3" in path else 0
        seqs.append(seq)
        if (rw, rh) != (w, h):
            ev.append(f"{w}x{h}: compiled as {rw}x{rh}" + (f" ({seq} patches)" if seq else "") + "; feed images of that size")
        if rw * rh < lo:
            ev.append(f"{w}x{h}: {rw * rh} pixels < image_min_pixels {lo}: the runtime enlarges every image past it, "
                      "so this graph is never used")
        if rw * rh > hi:
            ev.append(f"{w}x{h}: {rw * rh} pixels > image_max_pixels {hi}: the runtime shrinks every image below it")
    if not ev:
        return seqs, notes
    never = any("never used" in e or "shrinks" in e for e in ev)
    return seqs, [*notes, Finding(
        id="vl_image_sizes", graph="visual.mnn", step=4 if never else None, severity="error" if never else "warning",
        title="some --image_sizes do not match the sizes the runtime resizes images to",
        evidence=ev,
        consequence=("the encoder's QNN graphs have fixed shapes: an image whose resized size has no compiled graph "
                     "cannot run on the NPU encoder"),
        remedy=(f"choose sizes that are multiples of {unit} px with a pixel count within [{lo}, {hi}] "
                "(llm_config.json image_min_pixels / image_max_pixels), and resize your images to them"),
        sources=[S.VL_VISUAL_IO.cite(), S.IMAGE_RESIZE.cite(), S.VL_CONVERT_VISUAL.cite()])]


def visual_missing(folder: ExportFolder, path: Path) -> Finding:
    return Finding(
        id="visual_model_missing", graph="visual.mnn", step=1, severity="error",
        title=f"the export is a VL model but {path.name} is missing",
        evidence=[f"llm_config.json is_visual = {(folder.llm_config or {}).get('is_visual')!r}, model_type = "
                  f"{(folder.llm_config or {}).get('model_type')!r}", f"files: {', '.join(folder.files[:12])}"],
        consequence=("generate_llm_qnn.py --model_name visual.mnn stops at Step1 (generateIO cannot load it), and "
                     "the LLM runtime fails to load the model at all (is_visual loads visual_model first)"),
        remedy="copy visual.mnn and visual.mnn.weight from the export (llmexport.py writes them), or re-export",
        sources=[r.cite() for r in (S.VISUAL_MODEL_DEFAULT, S.VISUAL_LOAD, S.VL_CONVERT_VISUAL)])


def vl_findings(folder: ExportFolder, llm: MnnModel, visual: MnnModel | None,
                sizes: list[tuple[int, int]]) -> tuple[list[IoRow], list[int], list[Finding]]:
    """IO configs of both conversions, runtime inputs and image sizes (the graphs' op checks are check.py's)."""
    path = script_path(folder)
    rows, found = _llm_io(folder, llm, path)
    seqs: list[int] = []
    if visual is not None:
        assumed = not sizes
        sizes = sizes or DEFAULT_IMAGE_SIZES
        vrows, vfound = _visual_io(folder, visual, path, sizes)
        rows += vrows
        found += vfound
        seqs, sfound = _image_sizes(folder, sizes, path, assumed)
        found += sfound
    found += _runtime(folder, llm, visual)
    return rows, seqs, found
