"""``qnn-debug llm-check EXPORT_DIR``: static check of an llmexport folder for the QNN LLM path."""

from __future__ import annotations

import sys
from typing import Any

from ..llm.check_models import STEPS
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
    if s.transformer_c4_evidence:
        out.write(f"c4={s.transformer_c4}: {s.transformer_c4_evidence}\n")
    for seg in r.segments:
        out.write(f"segment {seg.index} ({'NPU' if seg.npu else 'CPU'}): ops {seg.first_op_index}..{seg.last_op_index} "
                  f"({seg.ops}) {seg.first_op!r} .. {seg.last_op!r}\n")
    if r.visual is not None:
        v = r.visual
        sizes = ", ".join(f"{w}x{h}" + (f" ({n} patches)" if n else "")
                          for (w, h), n in zip(v.image_sizes, v.vision_seq or [0] * len(v.image_sizes), strict=False))
        out.write(f"{v.model}: {v.ops} ops, {v.npu_segments} NPU segment(s) of {v.segments}; inputs "
                  f"{', '.join(f'{k}{s}' for k, s in v.inputs.items())}; outputs {', '.join(v.outputs)}"
                  + (f"; image sizes {sizes}" if sizes else "") + "\n")
    for row in r.io_config:
        if row.problem:
            out.write(f"IO config {row.graph} {row.name}: generate_llm_qnn.py {row.io_config}, graph {row.declared} "
                      f"({row.problem})\n")
    if not r.findings:
        out.write("no findings\n")
    else:
        out.write(f"\n{r.order}\n")
    for f in r.findings:
        where = f"breaks {STEPS[f.step]}" if f.step is not None else "breaks no step"
        out.write(f"\n[{f.severity}] {f.id}{f' [{f.graph}]' if f.graph else ''} ({where}): {f.title}\n")
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
    "Ops QNN lacks inside NPU segments, quantized integer tensors, Mul encodings, export settings — with MNN sources. "
    "VL exports: visual.mnn too, both IO configs generate_llm_qnn.py derives from the folder name, deepstack and "
    "--image-sizes."))
