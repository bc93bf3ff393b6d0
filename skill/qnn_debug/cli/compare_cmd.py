"""``qnn-debug compare REFERENCE TARGET``: metrics per tensor, the first failing op and a verdict.

``--json`` takes an optional value here: ``--json`` or ``--json -`` prints the one JSON document on
stdout (the project-wide convention), ``--json FILE`` writes it to FILE and keeps the human summary on
stdout. A bare ``--json`` directly before the positional arguments still means stdout: a token is only
taken as FILE when REFERENCE and TARGET are both given elsewhere on the line. On an error nothing is
written to FILE (the message goes to stderr and the exit code says 2 or 3), and FILE is never allowed to
replace an existing file that is not ``.json``.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

from .builder import JsonFlag, op_command

STDOUT = "-"


def normalize_optional_value(args: list[str], option: str, params: list[Any], flag_value: str = STDOUT) -> list[str]:
    """Rewrite ``option`` without a value into ``option=flag_value`` (click cannot make values optional
    through typer). The next token is the option's value only if the positionals are complete without it."""
    if option not in args:
        return args
    k = args.index(option)
    nxt = args[k + 1] if k + 1 < len(args) else None
    if nxt is None or (nxt.startswith("-") and nxt != STDOUT):
        return [*args[:k], f"{option}={flag_value}", *args[k + 1 :]]
    # typer vendors its own click, so parameters are told apart by click's ``param_type_name``.
    options = [p for p in params if p.param_type_name == "option"]
    needs_value = {o for p in options if not p.is_flag and not p.count for o in p.opts}
    wanted = sum(1 for p in params if p.param_type_name == "argument" and p.required)
    rest = args[:k] + args[k + 2 :]
    positionals, i = 0, 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--":
            positionals += len(rest) - i - 1
            break
        if tok in needs_value:
            i += 2
            continue
        if not tok.startswith("-") or tok == STDOUT:
            positionals += 1
        i += 1
    if positionals < wanted:
        return [*args[:k], f"{option}={flag_value}", *args[k + 1 :]]
    return args


class OptionalJsonCommand(TyperCommand):
    """A typer command whose ``--json`` value is optional (see the module docstring)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        result: list[str] = super().parse_args(ctx, normalize_optional_value(list(args), "--json", self.params))
        return result


def _human(result: Any, request: Any) -> None:
    print_summary(result)
    if request.json_path is not None:
        typer.echo(f"JSON: {request.json_path}")


COMPARE_JSON = JsonFlag(
    option=typer.Option(None, "--json", metavar="[FILE|-]", help="JSON result: on stdout (--json or --json -) or into FILE."),
    annotation=str | None, to_stdout=lambda value: value == STDOUT,
    fields=lambda value: {} if value in (None, STDOUT) else {"json_path": value})

op_command("compare", "compare", _human, json=COMPARE_JSON, cls=OptionalJsonCommand, help_text=(
    "Compare TARGET with REFERENCE tensor by tensor, name the first failing op and give a verdict.\n\n"
    "TARGET is one run; a baseline directory is refused with a pointer to its reference/ run."))


def first_failing_words(result: Any) -> str:
    """The first failing row in words a reader can follow to the file: the model's tensor and node, the target's op
    (MNN's, when it ran the model), and for an MNN dump the t<N> tensor and the file holding it."""
    ff = result.first_failing
    model_node = (f"ONNX {ff.model_op_type} {ff.model_op}" if ff.model_op else
                  f"ONNX {ff.op_type} {ff.op}" if ff.op and not ff.fused and not ff.target_tensor else None)
    words = f"the model's tensor {ff.tensor!r}" + (f" (made by {model_node})" if model_node else "")
    mnn = result.mnn_model is not None or result.target_kind == "mnn-dump" or ff.dump_tensor is not None
    engine = "MNN" if mnn else "the target"
    if ff.target_tensor:
        words += (f"; it first fails inside it, at {engine} op {ff.op!r} ({ff.op_type}), a stage of the target's "
                  f"own whose output {ff.target_tensor!r} the reference does not have")
    elif ff.fused is not None:
        words += f"; {engine} ran it as op {ff.fused.op!r} ({ff.fused.op_type}), fusing {', '.join(ff.fused.model_nodes)}"
    elif mnn and ff.op:
        words += f"; {engine} op {ff.op!r} ({ff.op_type}) made it"
    if ff.dump_tensor:
        words += f"; in the dump it is {ff.dump_tensor}" + (f": file {ff.dump_file}" if ff.dump_file else "")
    return words + f" (position {ff.position} in execution order)"


def print_summary(result: Any) -> None:
    """The verdict, its next steps, the first failing op and the worst tensors, in a few lines.

    Numbers follow :mod:`qnn_debug.compare.fmt` (dB with one decimal, "exact" for identical tensors) and every
    excess names what it is measured from (the floor, or the fp16 cap when the floor is better or exact)."""
    from ..compare import fmt

    v, ff = result.verdict, result.first_failing
    typer.echo(f"verdict: {v.kind}" + (f" ({v.pattern})" if v.pattern != "none" else "") + f", confidence {v.confidence:.2f}")
    typer.echo(f"  {v.summary}")
    if ff is not None:
        le = ff.local_error
        local = (f"; local SQNR {fmt.db_unit(le.sqnr_db)} {fmt.local_inputs(le.inputs).rstrip(',')}"
                 if le is not None and le.sqnr_db is not None else "")
        typer.echo(f"first failing: {first_failing_words(result)}{local}")
    c = result.counts
    aliases = f" ({c['aliases']} of them target stages standing for a model tensor)" if c.get("aliases") else ""
    typer.echo(f"tensors: {c.get('aligned', 0)} aligned{aliases}, {c.get('unaligned', 0)} not aligned"
               + (f"; report: {result.report_files['markdown']}" if result.report_files else ""))
    if result.unaligned_by_reason:
        from ..compare.unaligned import words

        typer.echo(f"  not aligned, by reason: {words(result.unaligned_by_reason)}")
    th = result.thresholds
    cap = float(th.get("floor_cap_db", 60.0))
    quantized = result.precision == "quantized" or any(r.quantized for r in result.tensors)
    if quantized:
        typer.echo(f"  note: {fmt.quantized_note(cap, float(th.get('quant_lsb_ok', 4.0)))}")
    worst = sorted((r for r in result.tensors if r.excess_db), key=lambda r: -(r.excess_db or 0.0))[:5]
    if worst:
        typer.echo("worst tensors (position, name, SQNR against the reference):")
    for r in worst:
        f = (r.floor_metrics or {}).get("sqnr_db")
        typer.echo(f"  {r.position:>5} {r.label or r.name:<32} SQNR {fmt.db_unit(r.metrics.get('sqnr_db'))}, "
                   f"{fmt.shortfall(r.excess_db, f, cap, has_floor=result.floor is not None, quantized=quantized, sqnr=r.metrics.get('sqnr_db'))}, "
                   f"{r.status}")
    rail = [r for r in result.tensors if r.note]
    for r in rail[:3]:
        typer.echo(f"  {r.position:>5} {r.label or r.name:<32} {r.note}")
    if len(rail) > 3:
        typer.echo(f"  ... {len(rail) - 3} more at the rail, harmless (tensors[].note in the JSON)")
    for w in result.warnings[:5]:
        typer.echo(f"  warning: {w}")
    for i, step in enumerate(result.next_steps, 1):
        typer.echo(("next steps:\n" if i == 1 else "") + f"  {i}. {step.cli}    # {step.why}")


def _targets_human(r: Any, request: Any) -> None:
    """The summary, then every row where the gap steps up (the places to look), and the outputs."""
    typer.echo(f"compare-targets: {r.label_a} ({r.target_a}) against {r.label_b} ({r.target_b})")
    typer.echo(f"  {r.summary}")
    typer.echo(f"  each alone: {', '.join(f'{k}: {v}' for k, v in r.verdicts.items())}")
    shown = [x for x in r.rows if (x.step_db or 0.0) >= r.step_threshold_db or x in r.outputs][:20]
    if shown:
        typer.echo(f"  {'tensor':<40} {'op':<16} {r.label_a:>10} {r.label_b:>10} {'gap':>8} {'step':>8}")
    for x in shown:
        def db(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f}"

        typer.echo(f"  {x.name[:40]:<40} {(x.op_type or '?')[:16]:<16} {db(x.sqnr_a_db):>10} {db(x.sqnr_b_db):>10} "
                   f"{db(x.gap_db):>8} {db(x.step_db):>8}")
    for i, s in enumerate(r.next_steps, 1):
        typer.echo(("next steps:\n" if i == 1 else "") + f"  {i}. {s.cli}    # {s.why}")


op_command("compare-targets", "compare_targets", _targets_human, help_text=(
    "Locate where one target loses against another, tensor by tensor: A and B (e.g. diagnose's host/ and htp-sim/ "
    "run folders: MNN's own QNN path and ONNX Runtime's QNN EP on the same simulator) are each compared with "
    "BASELINE and joined by reference tensor; the first tensor where A falls 6 dB behind B with a 3 dB step is "
    "named, or the gap is said to build up over many ops."))
