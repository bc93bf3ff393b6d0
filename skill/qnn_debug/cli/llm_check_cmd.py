"""``qnn-debug llm-check EXPORT_DIR``: static check of an llmexport folder for the QNN LLM path."""

from __future__ import annotations

import sys

import typer

from ..errors import QnnDebugError
from .app import app
from .common import JSON_OPTION, emit, fail


@app.command("llm-check")
def llm_check(
    export_dir: str = typer.Argument(..., help="The folder llmexport.py --export mnn wrote (llm.mnn, llm_config.json, …)."),
    qnn_dir: str | None = typer.Option(None, "--qnn-dir", help="generate_llm_qnn.py's --cache_path dir or the model's qnn/ folder."),
    max_history_token: int | None = typer.Option(None, "--max-history-token", min=0,
                                                 help="The --max_history_token given to generate_llm_qnn.py (default: from qnn.json, else 0)."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Ops QNN lacks inside NPU segments, quantized integer tensors, Mul encodings, export settings — with MNN sources."""
    from ..llm.check import LlmCheckRequest, LlmCheckResult, check_llm_export

    try:
        result = check_llm_export(LlmCheckRequest(export_dir=export_dir, qnn_dir=qnn_dir, max_history_token=max_history_token))
    except QnnDebugError as e:
        fail(e, json_out)
        return

    def human(r: LlmCheckResult = result) -> None:
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

    emit(result, json_out, human)
