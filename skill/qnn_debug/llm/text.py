"""Compare an LLM's generated text and logits with a CPU reference from MNN's own LLM runtime.

The stock NPU LLM path has no tensor dump, so the end-to-end evidence is the text: the reference is the
MNN wheel's ``MNN.llm`` on CPU, greedy, on the export folder (``config.json``); the target is ``llm_demo``
on a phone (text only), another export folder run the same way (e.g. the quantized NPU export vs the
float one; text and logits), or a text the user captured. The reference is then teacher-forced along the
target's tokens, so each step compares both runs after the *same* prefix: the first step where the target
picks a token the reference would not is the first divergence (with both logits of the reference, to
tell a near tie from a broken model), the top-1 agreement counts such steps, and with target logits each
step gets an SQNR. Both texts also go through the garbled-text detector.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np

from .. import fs
from ..errors import BadInputError, TargetError
from ..progress import NULL_PROGRESS, Progress
from . import text_budget
from .export_reader import ExportFolder, read_export
from .garbled import detect_garbled
from .image import (
    PLACEHOLDER,
    ImageInput,
    VisionSettings,
    check_image,
    place_image,
    refuse_media_tags,
    store_image,
    vision_settings,
)
from .llm_demo import run_llm_demo
from .logits_diff import DeviceLogitsDiff, run_logits_diff
from .text_models import (
    Divergence,
    LlmTextRequest,
    LlmTextResult,
    TextComparison,
    TextRun,
)

NEAR_TIE = 0.5  # reference logit margin (top-1 minus the target's token) below which a flip is a tie
# Per-step logits SQNR below which the runs differ by more than precision/quantization noise (a judgment:
# fp16 vs fp32 of a healthy decoder stays well above 30 dB; a wrong rotary in one layer of the tiny model
# gives 12-17 dB). Only used when the target has logits.
LOGITS_SQNR_BAD_DB = 20.0
# Two exports with byte-identical weights on the same CPU runtime agree to > 100 dB (measured); what remains below
# this is a difference in the graph itself (a broken rotary in one layer of 4-28 gave 23-35 dB with no or one
# near-tie token flip, which the 20 dB rule called a match).
SAME_WEIGHTS_SQNR_BAD_DB = 60.0
# Median logits SQNR the image may cost against the text-only run before the image path is named (a judgment:
# a healthy target loses nothing to the image; the tiny Qwen3-VL's one-layer faults cost 170 dB against exact
# text-only logits, and a chunked M-RoPE in one layer leaves a 28-35 dB image run the verdict alone calls fine).
IMAGE_SQNR_DROP_DB = 20.0


def _stop_ids(export_dir: str) -> list[int]:
    """Stop token ids from the tokenizer file's text header (``430 <type>`` / counts / ids)."""
    folder = read_export(export_dir)
    name = str((folder.config or {}).get("tokenizer_file", "tokenizer.txt"))
    path = Path(folder.dir) / name
    try:
        with fs.open_read(path, what="tokenizer file") as f:
            head = [f.readline(1 << 20).decode("utf-8", "replace") for _ in range(3)]
        special, stop, _ = (int(x) for x in head[1].split()[:3])
        ids = [int(x) for x in head[2].split()]
        return ids[special: special + stop]
    except (OSError, ValueError, IndexError, BadInputError):
        return []


def _vocab(folder: ExportFolder) -> int:
    """Vocabulary size from the tokenizer file's header (4th line), else a bound larger than any Qwen's."""
    name = str((folder.config or {}).get("tokenizer_file", "tokenizer.txt"))
    try:
        with fs.open_read(Path(folder.dir) / name, what="tokenizer file") as f:
            head = [f.readline(1 << 20) for _ in range(4)]
        return max(1, int(head[3].split()[0]))
    except (OSError, ValueError, IndexError, BadInputError):
        return 262144


def _config(export_dir: str, steps: int, prompt_bytes: int, budget: int) -> str:
    """The export's config.json, once its files are there and its runtime fits the memory budget."""
    folder = read_export(export_dir)
    cfg = Path(folder.dir) / "config.json"
    if not cfg.is_file():
        raise BadInputError(f"{folder.dir} has no config.json", hint="MNN's LLM runtime starts from the export's config.json")
    if not folder.weight_present:
        raise BadInputError(f"{folder.dir} lacks its llm.mnn.weight", hint="the LLM runtime refuses to load without it")
    weight = Path(folder.dir) / str((folder.config or {}).get("llm_weight", Path(folder.model_path).name + ".weight"))
    text_budget.check(folder.dir, weight, folder.llm_config, _vocab(folder), steps, prompt_bytes, budget)
    return str(cfg)


def _vision(export_dir: str) -> VisionSettings:
    folder = read_export(export_dir)
    return vision_settings(folder.dir, folder.config, folder.llm_config)


def _is_multimodal(export_dir: str) -> bool:
    folder = read_export(export_dir)
    cfg = {**(folder.llm_config or {}), **(folder.config or {})}
    return bool(cfg.get("is_visual") or cfg.get("is_audio"))


def _mnn_llm(export_dir: str, prompt: str, steps: int, out: Path, *, budget: int, follow: list[int] | None = None,
             follow_text: str | None = None, image: ImageInput | None = None, progress: Progress) -> dict[str, object]:
    from ..workers import run_worker

    image_req = {"file": image.stored, "pad_id": _vision(export_dir).image_pad} if image is not None else None
    prompt_bytes = len(prompt.encode("utf-8")) + len((follow_text or "").encode("utf-8")) + len(follow or [])
    request = {"config": _config(export_dir, steps, prompt_bytes, budget), "prompt": prompt, "max_new_tokens": steps, "out": str(out),
               "stop_ids": _stop_ids(export_dir), "follow": follow, "follow_text": follow_text, "image": image_req}
    try:
        return run_worker("qnn_debug.llm.text_worker", request, log_path=out / "mnn_llm.log", timeout=900,
                          progress=progress, what="MNN LLM runtime", max_rss=budget,
                          max_rss_hint=text_budget.hint(budget))
    except TargetError as e:
        said = _runtime_errors(out / "mnn_llm.log")
        if not said:
            raise
        raise TargetError(f"{e.message}; MNN said: {' | '.join(said)}", hint=e.hint, details=e.details) from None


def _runtime_errors(log: Path) -> list[str]:
    """MNN's own error lines from a worker log (shape errors, unsupported layouts, an image it could not use)."""
    try:
        text = fs.read_text(log, what="worker log", max_bytes=4 << 20, errors="replace")
    except BadInputError:
        return []
    keys = ("Error", "error", "must", "not support", "Not support", "failed", "Can't open image", "Can't decode")
    return [ln.strip() for ln in text.splitlines() if any(k in ln for k in keys)][:4]


def compare_tokens(reference_greedy: list[int], target: list[int], follow_logits: np.ndarray,
                   target_logits: np.ndarray | None = None) -> TextComparison:
    """First divergence / top-1 agreement along the target's path, and per-step logits SQNR if given."""
    from ..compare.metrics import error_stats, metric_values

    n = min(len(target), len(follow_logits))
    agree = [int(np.argmax(follow_logits[i])) == target[i] for i in range(n)]
    first = next((i for i, ok in enumerate(agree) if not ok), None)
    div = None
    if first is not None:
        row = follow_logits[first]
        top = int(np.argmax(row))
        margin = float(row[top] - row[target[first]])
        div = Divergence(step=first, reference_token=top, target_token=target[first], margin=margin,
                         target_rank=int((row > row[target[first]]).sum()), near_tie=margin < NEAR_TIE)
    sqnr: list[float | None] = []
    if target_logits is not None:
        for i in range(min(n, len(target_logits))):
            sqnr.append(metric_values(error_stats(target_logits[i], follow_logits[i]))["sqnr_db"])
    vals = [v for v in sqnr if v is not None]
    return TextComparison(steps=n, first_divergence=div, top1_agreement=float(np.mean(agree)) if agree else 1.0,
                          agreeing_prefix=first if first is not None else n, logits_sqnr_db=sqnr,
                          logits_sqnr_min_db=min(vals) if vals else None,
                          logits_sqnr_median_db=float(np.median(vals)) if vals else None)


def _run(doc: dict[str, object], source: str, out: Path) -> TextRun:
    tokens = [int(t) for t in doc.get("tokens") or []]  # type: ignore[attr-defined]
    text = str(doc.get("text", ""))
    return TextRun(source=source, prompt_ids=list(doc.get("prompt_ids") or []),  # type: ignore[call-overload]
                   tokens=tokens, text=text, undecodable_pieces=int(doc.get("undecodable") or 0),  # type: ignore[call-overload]
                   logits=str(out / str(doc["logits"])) if doc.get("logits") else None, garbled=detect_garbled(text),
                   image_tokens=int(doc["image_tokens"]) if doc.get("image_tokens") else None)  # type: ignore[call-overload]


def llm_text(request: LlmTextRequest, progress: Progress = NULL_PROGRESS) -> LlmTextResult:
    """Reference run, optional target run, comparison and verdict; logits and logs under ``request.out``."""
    targets = [t for t in (request.target_export, request.target_text, request.device) if t is not None]
    if len(targets) > 1:
        raise BadInputError("give at most one target (target_export, target_text or device)", hint="run once per target")
    if request.target_logits and not (request.target_text or request.device):
        raise BadInputError("target_logits goes with target_text or device", hint="target_export brings its own logits")
    _check_image_request(request)
    checked = check_image(request.image) if request.image is not None else None
    out = fs.claim_dir(request.out, what="--out")
    try:
        image = store_image(request.image, *checked, out) if request.image is not None and checked else None
        result = _llm_text(request, out, progress, image)
        if image is not None and request.also_text_only:
            result = _with_text_only(request, result, out, progress)
        fs.atomic_write_text(out / "llm_text.json", result.model_dump_json(indent=1))
        return result
    finally:
        fs.release_dir(out)


def _check_image_request(request: LlmTextRequest) -> None:
    """Everything about an image that can be refused before MNN starts."""
    exports = [request.export_dir] + ([request.target_export] if request.target_export else [])
    if request.also_text_only and (request.image is None or not (request.target_export or request.device)):
        raise BadInputError("also_text_only runs the target a second time without the image: it needs --image and a "
                            "target that can run again (--target-export or the phone)",
                            hint="for a captured text, run llm-text again without --image, with the phone's answer to "
                            "the text-only prompt as --target-text")
    if request.image is None:
        if any(_is_multimodal(e) for e in exports):
            refuse_media_tags(request.prompt, allow_placeholder=False)
        return
    if request.device is not None and request.device_logits_diff:
        raise BadInputError("llm_logits_diff encodes the prompt with its first config only, so the second (NPU) config "
                            "would get the image's tokens without the image", hint="drop --device-logits-diff: llm_demo "
                            "takes the image as <img>path</img>")
    refuse_media_tags(request.prompt, allow_placeholder=True)
    place_image(request.prompt)
    for e in exports:
        _vision(e)


def _llm_text(request: LlmTextRequest, out: Path, progress: Progress, image: ImageInput | None = None) -> LlmTextResult:
    from ..localise.budget import default_budget

    notes: list[str] = []
    device_diff: DeviceLogitsDiff | None = None
    budget = request.max_memory or default_budget()
    prompt = place_image(request.prompt) if image is not None else request.prompt
    ref_doc = _mnn_llm(request.export_dir, prompt, request.max_new_tokens, out / "reference", image=image,
                       budget=budget, progress=progress)
    reference = _run(ref_doc, f"MNN.llm CPU greedy on {request.export_dir}", out / "reference")
    target: TextRun | None = None
    target_logits: np.ndarray | None = None
    follow: list[int] | None = None
    follow_text: str | None = None
    if request.target_export:
        t_doc = _mnn_llm(request.target_export, prompt, request.max_new_tokens, out / "target", image=image,
                         budget=budget, progress=progress)
        target = _run(t_doc, f"MNN.llm CPU greedy on {request.target_export}", out / "target")
        target_logits = np.load(target.logits) if target.logits else None
        follow = target.tokens
    elif request.device is not None and request.device_logits_diff:
        dev = request.device
        device_diff = run_logits_diff(dev.serial, dev.model_dir, dev.cpu_config, dev.config, request.prompt,
                                      request.max_new_tokens, dev.logits_diff_tool, dev.lib_dir, dev.timeout_s,
                                      out / "llm_logits_diff.log")
        target = TextRun(source=f"phone CPU ({dev.cpu_config}) driving llm_logits_diff against {dev.config}",
                         tokens=[st.token_a for st in device_diff.steps], text="".join(st.text for st in device_diff.steps))
        follow = target.tokens
        notes.append("the phone's CPU config drives the tokens; its agreement with this machine's reference checks "
                     "the phone's CPU path, device_diff compares the phone's CPU with its NPU config step by step")
    elif request.device is not None:
        demo = run_llm_demo(request.device, prompt, request.max_new_tokens, out / "llm_demo.log",
                            image=Path(image.stored) if image is not None else None)
        target = TextRun(source=f"llm_demo on the phone ({request.device.model_dir}/{request.device.config}, greedy copy)",
                         text=demo.text, garbled=detect_garbled(demo.text), demo=demo)
        follow_text = demo.text
        notes.append("the phone's text was re-tokenized with the reference tokenizer (llm_demo prints text, not ids)")
    elif request.target_text is not None:
        target = TextRun(source="text given by the user", text=request.target_text, garbled=detect_garbled(request.target_text))
        follow_text = request.target_text
        notes.append("the given text was re-tokenized with the reference tokenizer")
    if request.target_logits:
        target_logits = _load_logits(request.target_logits)
    comparison = None
    if target is not None and (follow or follow_text):
        f_doc = _mnn_llm(request.export_dir, prompt, max(1, len(follow or [])), out / "follow", budget=budget,
                         follow=follow, follow_text=follow_text, image=image, progress=progress)
        target.tokens = target.tokens or [int(t) for t in f_doc.get("follow_tokens") or []]  # type: ignore[attr-defined]
        f_logits = np.load(out / "follow" / str(f_doc["follow_logits"])) if f_doc.get("follow_logits") else np.zeros((0, 1))
        comparison = compare_tokens(reference.tokens, target.tokens, f_logits, target_logits)
        _name_pieces(comparison, f_doc)
    limit = LOGITS_SQNR_BAD_DB
    if request.target_export and _same_weight_file(request.export_dir, request.target_export):
        limit = SAME_WEIGHTS_SQNR_BAD_DB
        notes.append(f"both exports hold byte-identical llm.mnn.weight files, so the logits must agree to more than "
                     f"{limit:.0f} dB on the same CPU runtime; less is a difference in the graph, not in precision")
    verdict, summary = (_diff_verdict(device_diff) if device_diff is not None
                        else _verdict(reference, target, comparison, limit))
    if reference.undecodable_pieces:
        notes.append(f"{reference.undecodable_pieces} reference token(s) are not valid UTF-8 on their own (parts of "
                     "multi-token characters); the reference text leaves them out")
    version = str(ref_doc["mnn_version"]) if ref_doc.get("mnn_version") else None
    if image is not None:
        notes.append(f"the image went through MNN {version}'s own preprocessing (resize to the export's image_size, "
                     "patches, M-RoPE positions); MNN changed that preprocessing after 3.6.1, so llm_demo on the phone must "
                     "come from the same MNN version for its text to be comparable")
    return LlmTextResult(out=str(out), prompt=prompt, reference=reference, target=target, comparison=comparison,
                         device_diff=device_diff, verdict=verdict, summary=summary, notes=notes, image=image,
                         mnn_version=version)


def _with_text_only(request: LlmTextRequest, with_image: LlmTextResult, out: Path, progress: Progress) -> LlmTextResult:
    """The same comparison without the image, and which path the two verdicts point at."""
    text_prompt = request.prompt.replace(PLACEHOLDER, "").strip() or "Hello"
    alone = _llm_text(request.model_copy(update={"prompt": text_prompt, "image": None}), out / "text_only", progress)
    with_image.text_only = alone
    bad = {"diverged", "garbled"}
    if alone.verdict in bad:
        with_image.image_path = "text_path"
        with_image.summary += (f"; without the image it diverges too ({alone.summary}): the decoder's text path is "
                               "broken, look at llm.mnn first")
    elif with_image.verdict in bad:
        with_image.image_path = "image_path"
        with_image.summary += (f"; without the image the target agrees ({alone.verdict}): the fault is on the image path "
                               "(visual.mnn, the image embeddings or deepstack features, the image's M-RoPE positions)")
    elif (drop := _sqnr_drop(with_image, alone)) is not None and drop >= IMAGE_SQNR_DROP_DB:
        with_image.image_path = "image_path"
        with_image.summary += (f"; both runs pass the token check, but the image costs {drop:.0f} dB of "
                               "logits SQNR: the image path (visual.mnn, deepstack, the image's M-RoPE positions) "
                               "computes something else")
    else:
        with_image.image_path = "both_fine"
    return with_image


def _sqnr_drop(with_image: LlmTextResult, alone: LlmTextResult) -> float | None:
    a, b = with_image.comparison, alone.comparison
    if a is None or b is None or a.logits_sqnr_median_db is None or b.logits_sqnr_median_db is None:
        return None
    return b.logits_sqnr_median_db - a.logits_sqnr_median_db


def _load_logits(path: str) -> np.ndarray:
    p = fs.check(path, what="target_logits", kind="file")
    try:
        arr = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise BadInputError(f"{p} is not a readable .npy file ({e})", hint="save the logits with numpy.save") from None
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.floating):
        raise BadInputError(f"{p} holds {arr.dtype} {list(arr.shape)}, not float [steps, vocab]", hint="one row per generated token")
    return arr.astype(np.float32)


def _name_pieces(c: TextComparison, f_doc: dict[str, object]) -> None:
    if c.first_divergence is None:
        return
    d = c.first_divergence
    top1 = list(f_doc.get("follow_top1_pieces") or [])  # type: ignore[call-overload]
    own = list(f_doc.get("follow_pieces") or [])  # type: ignore[call-overload]
    d.reference_piece = top1[d.step] if d.step < len(top1) else None
    d.target_piece = own[d.step] if d.step < len(own) else None


def _same_weight_file(a: str, b: str) -> bool:
    """Both export folders hold an ``llm.mnn.weight`` with the same bytes (sizes first, then a streamed hash)."""
    import hashlib

    try:
        files = [fs.check(Path(d) / "llm.mnn.weight", what="llm.mnn.weight", kind="file") for d in (a, b)]
    except BadInputError:
        return False
    if files[0].stat().st_size != files[1].stat().st_size:
        return False
    digests = []
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
        digests.append(h.digest())
    return digests[0] == digests[1]


def _verdict(reference: TextRun, target: TextRun | None, c: TextComparison | None,
             limit: float = LOGITS_SQNR_BAD_DB) -> tuple[
        Literal["reference_only", "match", "near_tie_flip", "diverged", "garbled"], str]:
    ref_bad = reference.garbled is not None and reference.garbled.garbled
    if target is None or c is None:
        why = f"; the reference itself looks garbled ({'; '.join(reference.garbled.reasons)})" if ref_bad and reference.garbled else ""
        return "reference_only", f"reference: {len(reference.tokens)} tokens {reference.text[:80]!r}{why}"
    if target.garbled is not None and target.garbled.garbled and not ref_bad:
        return "garbled", (f"the target's text is garbled ({'; '.join(target.garbled.reasons)}) while the CPU reference "
                           f"is not; first divergence at step {c.agreeing_prefix}")
    d = c.first_divergence
    sq = f"; logits SQNR min {c.logits_sqnr_min_db:.1f} dB, median {c.logits_sqnr_median_db:.1f} dB" if c.logits_sqnr_min_db is not None else ""
    bad_logits = c.logits_sqnr_median_db is not None and c.logits_sqnr_median_db < limit
    if d is None and not bad_logits:
        return "match", f"all {c.steps} target tokens are the reference's top-1 given the same prefix{sq}"
    if d is None:
        return "diverged", (f"the tokens agree, but the logits do not (median SQNR below {limit:.0f} dB): "
                            f"the target computes something else{sq}")
    if d.near_tie and c.top1_agreement >= 0.9 and not bad_logits:
        return "near_tie_flip", (f"first divergence at step {d.step} is a near tie (reference margin {d.margin:.2f}); "
                                 f"top-1 agreement {c.top1_agreement:.0%}{sq}")
    return "diverged", (f"first divergence at step {d.step}: reference {d.reference_piece!r} vs target {d.target_piece!r} "
                        f"(margin {d.margin:.2f}, target's token ranked {d.target_rank}); top-1 agreement "
                        f"{c.top1_agreement:.0%}{sq}")


def _diff_verdict(d: DeviceLogitsDiff) -> tuple[Literal["match", "near_tie_flip", "diverged"], str]:
    n = len(d.steps)
    dist = f"; worst max |Δlogit| {d.worst_max_abs_diff:.3g}" if d.worst_max_abs_diff is not None else ""
    dist += f", mean KL(CPU||NPU) {d.mean_kl:.3g}" if d.mean_kl is not None else ""
    if d.first_disagreement is None:
        return "match", f"the phone's NPU config picks the CPU config's top-1 at all {n} steps{dist}"
    first = next((st for st in d.steps if st.step == d.first_disagreement), None)
    margin = first.margin_a if first is not None else float("inf")
    if margin < NEAR_TIE and d.disagreements <= max(1, n // 10):
        return "near_tie_flip", (f"NPU and CPU disagree first at step {d.first_disagreement}, a near tie (CPU margin "
                                 f"{margin:.2f}); {d.disagreements}/{n} steps disagree{dist}")
    return "diverged", (f"NPU and CPU disagree first at step {d.first_disagreement} (CPU margin {margin:.2f}); "
                        f"{d.disagreements}/{n} steps disagree{dist}")


def read_result(path: str | Path) -> LlmTextResult:
    return LlmTextResult.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
