"""``qnn-debug llm-check EXPORT_DIR``: static check of an llmexport folder for the QNN LLM path."""

from __future__ import annotations

import sys
from typing import Any

from .builder import op_command


def human(r: Any, request: Any) -> None:
    out = sys.stdout
    s = r.settings
    out.write(f"{r.model}: {r.ops} ops, {sum(x.npu for x in r.segments)} NPU segment(s) of {len(r.segments)} "
              f"(KV limit {s.kv_limit}: {s.kv_limit_source})\n")
    out.write(f"settings ({s.source}): model_type={s.model_type} npu_export={s.generate_for_npu} c4={s.transformer_c4} "
              f"weight_bits={s.weight_bits} calibration={s.calibration} act_bits={s.activation_bits} "
              f"act_sym={s.activation_symmetric} encodings={s.quantized_tensors} "
              f"mask(config/model)={s.attention_mask_config}/{s.attention_mask_model}\n")
    if not r.findings:
        out.write("no findings\n")
    for f in r.findings:
        out.write(f"\n[{f.severity}] {f.id}: {f.title}\n")
        for e in f.evidence:
            out.write(f"  - {e}\n")
        if f.consequence:
            out.write(f"  why: {f.consequence}\n")
        if f.remedy:
            out.write(f"  fix: {f.remedy}\n")
        if f.how_to_see:
            out.write(f"  see: {f.how_to_see}\n")
        for src in f.sources:
            out.write(f"  source: {src}\n")


op_command("llm-check", "llm_check", human, help_text=(
    "Ops QNN lacks inside NPU segments, quantized integer tensors, Mul encodings, export settings — with MNN sources."))
