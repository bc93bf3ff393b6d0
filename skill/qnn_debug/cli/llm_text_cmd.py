"""``qnn-debug llm-text EXPORT_DIR``: CPU reference text/logits (MNN.llm) vs a phone's llm_demo or another export."""

from __future__ import annotations

import sys
from typing import Any

from .builder import op_command


def human(r: Any, request: Any) -> None:
    w = sys.stdout.write
    w(f"verdict: {r.verdict} — {r.summary}\n")
    if r.image is not None:
        w(f"image: {r.image.source} ({r.image.format} {r.image.width}x{r.image.height}), "
          f"{r.reference.image_tokens} image tokens in the reference prompt (MNN {r.mnn_version})\n")
    w(f"reference ({r.reference.source}): {r.reference.text[:200]!r}\n")
    if r.reference.garbled and r.reference.garbled.garbled:
        w(f"  reference looks garbled: {'; '.join(r.reference.garbled.reasons)}\n")
    if r.target is not None:
        w(f"target ({r.target.source}): {r.target.text[:200]!r}\n")
        if r.target.garbled and r.target.garbled.garbled:
            w(f"  garbled: {'; '.join(r.target.garbled.reasons)}\n")
    d = r.device_diff
    if d is not None:
        w(f"phone llm_logits_diff {d.config_a} vs {d.config_b}: {d.disagreements}/{len(d.steps)} steps disagree, "
          f"first at {d.first_disagreement}, worst max |diff| {d.worst_max_abs_diff}, mean KL {d.mean_kl}\n")
    c = r.comparison
    if c is not None:
        w(f"steps {c.steps}, agreeing prefix {c.agreeing_prefix}, top-1 agreement {c.top1_agreement:.1%}\n")
        if c.logits_sqnr_db:
            w("logits SQNR per step (dB): " + " ".join("-" if v is None else f"{v:.1f}" for v in c.logits_sqnr_db[:32]) + "\n")
    if r.text_only is not None:
        w(f"without the image: {r.text_only.verdict} — {r.text_only.summary}\n")
    if r.image_path is not None:
        w(f"image path vs text path: {r.image_path}\n")
    for n in r.notes:
        w(f"note: {n}\n")
    w(f"files: {r.out}\n")


op_command("llm-text", "llm_text", human, progress=lambda request, as_json: not as_json, help_text=(
    "Greedy tokens and per-step logits on CPU, the target's text, first divergent token, top-1 agreement, SQNR, garbled check."))
