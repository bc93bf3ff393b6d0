"""``qnn-debug llm-text EXPORT_DIR``: CPU reference text/logits (MNN.llm) vs a phone's llm_demo or another export."""

from __future__ import annotations

import sys

import typer

from ..errors import BadInputError, QnnDebugError
from .app import app
from .common import JSON_OPTION, cli_progress, emit, fail


@app.command("llm-text")
def llm_text_cmd(
    export_dir: str = typer.Argument(..., help="The llmexport folder (config.json, llm.mnn, llm.mnn.weight) for the CPU reference."),
    out: str = typer.Option(..., "--out", help="New directory for logits, logs and llm_text.json."),
    prompt: str | None = typer.Option(None, "--prompt", help="The prompt (default: Hello)."),
    prompt_file: str | None = typer.Option(None, "--prompt-file", help="Read the prompt from this UTF-8 file."),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", min=1, max=512, help="Tokens to generate."),
    target_export: str | None = typer.Option(None, "--target-export", help="Another export folder, run on MNN CPU the same way."),
    target_text_file: str | None = typer.Option(None, "--target-text-file", help="Text a phone printed (UTF-8 file)."),
    target_text_arg: str | None = typer.Option(None, "--target-text", help="Text a phone printed, given inline."),
    target_logits: str | None = typer.Option(None, "--target-logits", help=".npy of the text/phone target's logits, one row per step (steps x vocab)."),
    device_model_dir: str | None = typer.Option(None, "--device-model-dir", help="Run llm_demo on the phone: folder with the config."),
    device_config: str = typer.Option("config_qnn.json", "--device-config", help="Config file name in --device-model-dir."),
    serial: str | None = typer.Option(None, "--serial", help="adb serial (default: the only device)."),
    llm_demo: str | None = typer.Option(None, "--llm-demo", help="llm_demo on the device (default: <device-model-dir>/llm_demo)."),
    lib_dir: str | None = typer.Option(None, "--lib-dir", help="Device folder with libMNN.so and the QNN libraries."),
    logits_diff: bool = typer.Option(False, "--device-logits-diff", help="On the phone run llm_logits_diff CPU config vs "
                                     "--device-config (per-step logits on the device) instead of llm_demo."),
    cpu_config: str = typer.Option("config.json", "--device-cpu-config", help="CPU config name for --device-logits-diff."),
    logits_diff_tool: str | None = typer.Option(None, "--llm-logits-diff", help="llm_logits_diff on the device "
                                                "(default: <device-model-dir>/llm_logits_diff)."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Greedy tokens and per-step logits on CPU, the target's text, first divergent token, top-1 agreement, SQNR, garbled check."""
    from .. import fs
    from ..llm.llm_demo import DeviceTextTarget
    from ..llm.text import LlmTextRequest, LlmTextResult, llm_text

    try:
        if prompt is not None and prompt_file is not None:
            raise BadInputError("give --prompt or --prompt-file, not both", hint="keep one of them")
        text = fs.read_text(prompt_file, what="--prompt-file", max_bytes=1 << 20) if prompt_file else (prompt or "Hello")
        if target_text_file is not None and target_text_arg is not None:
            raise BadInputError("give --target-text or --target-text-file, not both", hint="keep one of them")
        target_text = (fs.read_text(target_text_file, what="--target-text-file", max_bytes=8 << 20) if target_text_file
                       else target_text_arg)
        device = (DeviceTextTarget(serial=serial, model_dir=device_model_dir, config=device_config, llm_demo=llm_demo,
                                   lib_dir=lib_dir, cpu_config=cpu_config, logits_diff_tool=logits_diff_tool)
                  if device_model_dir else None)
        if logits_diff and device is None:
            raise BadInputError("--device-logits-diff needs --device-model-dir", hint="name the phone folder with both configs")
        request = LlmTextRequest(export_dir=export_dir, prompt=text.strip() or "Hello", max_new_tokens=max_new_tokens,
                                 out=out, target_export=target_export, target_text=target_text,
                                 target_logits=target_logits, device=device, device_logits_diff=logits_diff)
        with cli_progress(enabled=not json_out) as progress:
            result = llm_text(request, progress=progress)
    except QnnDebugError as e:
        fail(e, json_out)
        return

    def human(r: LlmTextResult = result) -> None:
        w = sys.stdout.write
        w(f"verdict: {r.verdict} — {r.summary}\n")
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
        for n in r.notes:
            w(f"note: {n}\n")
        w(f"files: {r.out}\n")

    emit(result, json_out, human)
