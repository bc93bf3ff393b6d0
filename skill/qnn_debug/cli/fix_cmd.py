"""``qnn-debug fix RESULT``: the fixed artefact for a verdict, written next to the user's file, and its proof."""

from __future__ import annotations

from typing import Any

import typer

from .builder import op_command


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} dB"


def _numbers(label: str, n: Any) -> str:
    if n is None:
        return f"{label}: -"
    db = _db
    outs = ", ".join(f"{o} {db(v)}" for o, v in n.outputs_sqnr_db.items())
    return f"{label}: {n.verdict} ({n.pattern}); {n.tensor}: {db(n.tensor_sqnr_db)}" + (f"; outputs: {outs}" if outs else "")


def human(r: Any, request: Any) -> None:
    state = "not proven" if not r.proven else "PROVEN here, the rest needs the phone" if r.not_proven else "PROVEN"
    typer.echo(f"fix {r.kind} for {r.verdict}: {state}")
    typer.echo(f"  {r.summary}")
    if r.artefact:
        typer.echo(f"fixed file: {r.artefact}")
    for s in r.sites:
        typer.echo(f"  rescale {s.source} by 2^-{s.exponent} ({s.place}); sized by {s.sized_by} from the "
                   f"{s.bound_source}: worst case {s.worst_case_max}, sample {s.sample_max}, after {s.after_max}")
    for c in r.proof:
        typer.echo(f"  [{'pass' if c.passed else 'FAIL'}] {c.name}: {c.detail}")
    if r.before is not None or r.after is not None:  # an export folder's fix has no numbers to show
        for line in (_numbers("before", r.before), _numbers("after", r.after)):
            typer.echo(line)
    if r.findings_before:
        after = (", ".join(r.findings_after) or "none") if r.proof else "not re-checked here (run the lines below, then llm-check)"
        typer.echo(f"llm-check findings before: {', '.join(r.findings_before)}; after: {after}")
    for line in r.commands:
        typer.echo(f"  run: {line}")
    for note in r.command_notes:
        typer.echo(f"    value: {note}")
    for n in r.not_proven:
        typer.echo(f"not proven here: {n}")
    if r.case_file:
        typer.echo(f"solved case added to {r.case_file}")
    for i, step in enumerate(r.next_steps, 1):
        typer.echo(("next steps:\n" if i == 1 else "") + f"  {i}. {step.cli}    # {step.why}")


op_command("fix", "fix", human, exit_code=lambda r: 1 if r.proof and not r.proven else 0, help_text=(
    "Write the fix for a comparison's verdict next to your file (never over it) and prove it.\n\n"
    "precision from the fp16 range: an exact power-of-two rescale, sized over --input-range, proven by fp32 "
    "equality, the range analysis on the sample and the worst case, and the HTP simulator. real_bug at a fused "
    "MNN op that lost its Relu: Relu as Max(x, 0), proven unfused in the converted .mnn and on MNN CPU; the QNN "
    "translation on a host MNN build given with --option mnn_build_dir=… --option qnn_lib_dir=… (else the phone: the "
    "command is printed). An llmexport folder (or its llm-check JSON): the "
    "re-export and generate_llm_qnn.py lines, and encodings on integer tensors removed from llm.mnn (previous "
    "file kept), re-checked. quantization at a clipping encoding: the encoding from the reference range (give "
    "--model with the QDQ model), re-run quantized on the simulator. input_not_copied: "
    "shapeMutable false in --test-dir. A solved case is appended to --cases only once the proof passed. Exit 1 "
    "when a fix was written but its proof failed."))
