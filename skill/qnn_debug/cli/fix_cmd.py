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


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _site(s: Any) -> str:
    """How the power of two was sized, each number named for what it is: the interval bound over the declared range
    (no input inside it goes higher), the corner input (every value at the range's end: one input, not the worst),
    the sample."""
    head = f"  rescale {s.source} by 2^-{s.exponent} ({s.place}); sized by {s.sized_by}"
    bound = s.interval_bound if s.interval_bound is not None else s.worst_case_max
    if s.bound_source == "interval":
        how = f" from its interval bound over the declared range, {_g(bound)} (no input in the range exceeds it)"
    else:
        how = (f" from the sample with a margin (the interval bound, {_g(bound)}, is too loose to use)"
               if bound is not None else " from the sample with a margin (no interval bound)")
    corner = f"; the corner input ({s.corner}) reaches {_g(s.corner_max)}" if s.corner else ""
    return f"{head}{how}{corner}; the sample reaches {_g(s.sample_max)}; after the fix at most {_g(s.after_max)}"


def human(r: Any, request: Any) -> None:
    failed = [c.name for c in r.proof if not c.passed]
    state = (f"NOT proven: failed {'; '.join(failed)}" if failed else "not proven" if not r.proven
             else "PROVEN here, the rest needs the phone" if r.not_proven else "PROVEN")
    if r.proven and r.left:
        state += " for what it was for; not everything is at the floor yet (see left: below)"
    typer.echo(f"fix {r.kind} for {r.verdict}: {state}")
    typer.echo(f"  {r.summary}")
    if r.artefact:
        typer.echo(f"fixed file: {r.artefact}")
    m = r.mnn
    if m is not None:
        if m.path:
            typer.echo(f"fixed .mnn: {m.path}  ({m.origin}; {m.not_from_file})")
        else:
            typer.echo(f"fixed .mnn: not written ({m.gate})")
    for s in r.sites:
        typer.echo(_site(s))
    for c in r.proof:
        typer.echo(f"  [{'pass' if c.passed else 'FAIL'}] {c.name}: {c.detail}")
    if r.before is not None or r.after is not None:  # an export folder's fix has no numbers to show
        for line in (_numbers("before", r.before), _numbers("after", r.after)):
            typer.echo(line)
    for item in r.left:
        typer.echo(f"left: {item}")
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
    "precision from the fp16 range: an exact power-of-two rescale, sized by its interval bound over --input-range, "
    "proven by fp32 equality, the range analysis on the sample and the range's corner input, and the HTP simulator. "
    "An ONNX fix is also converted to NAME.<fix>.mnn beside your .mnn (bizCode read from it), gated on MNN CPU. real_bug at a fused "
    "MNN op that lost its Relu: Relu as Max(x, 0), proven unfused in the converted .mnn and on MNN CPU; the QNN "
    "translation on a host MNN build given with --option mnn_build_dir=… --option qnn_lib_dir=… (else the phone: the "
    "command is printed). An llmexport folder (or its llm-check JSON): the "
    "re-export and generate_llm_qnn.py lines, and encodings on integer tensors removed from llm.mnn (previous "
    "file kept), re-checked. quantization at a clipping encoding: the encoding from the reference range (give "
    "--model with the QDQ model), re-run quantized on the simulator. input_not_copied: "
    "shapeMutable false in --test-dir. A solved case is appended to --cases only once the proof passed. Exit 1 "
    "when a fix was written but its proof failed."))
