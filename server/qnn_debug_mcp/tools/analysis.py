"""Numerical analysis tools: ``baseline``, ``dump_qnn``, ``compare``, ``diagnose``.

Each publishes its engine operation (:mod:`..publish`): the request model is the tool's arguments, the
work runs in an engine child under the shared inline/job policy in :mod:`..long_runs`.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

from ..publish import OpTool, model_stem, publish

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES_RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
WRITES_REPORT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                open_world_hint=False)  # each call writes a new report directory
WRITES_RUNS_MAYBE_DEVICE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                           open_world_hint=True)

BASELINE = """Step 1 of numerical debugging. Runs the model (.onnx or .mnn) on CPU in fp32 and keeps
EVERY intermediate tensor (the reference), an fp16 "floor" (the error fp16 alone causes) and
an MNN-CPU cross-check that says whether the reference can be trusted. Returns the baseline
directory (`result.out`), `result.report.trusted` and the inputs file that dump_qnn should
reuse. Runs as a background job by default (seconds for small models, minutes for big ones):
if `status` is running, follow `job_id` with job_result."""

DUMP = """Step 2: run the model on a QNN target and capture EVERY intermediate tensor in one run,
refusing any silent CPU fallback. Returns the run directory (`result.out`), tensor counts and
the observer effect of marking all tensors as outputs. Pass the baseline's inputs.npz as
`inputs`. Runs as a background job by default: follow `job_id` with job_result."""

COMPARE = """Step 3: compare a QNN run with the baseline tensor by tensor. `reference` is the baseline
directory (or a reference run); `target` is a dump_qnn/run_on_device run directory, an MNN
QNN dump directory (manifest_*.tsv + .raw; give `mnn_model` to name t<N> tensors) or an .npz.
Returns `result.first_failing` (tensor, op, op type, position, local error), `result.verdict`
(kind ok / precision / quantization / real_bug / input_not_copied / undecided, pattern, confidence,
summary, evidence), the `top` worst tensor rows against the fp16 floor, and `report_uri`
(the full Markdown report; the table, JSON and an error-by-position plot are resources too)."""

DIAGNOSE = """All of baseline + dump_qnn + compare in one call for an .onnx model: the first failing
op and the verdict (real bug vs fp16/quantization error) with the evidence, the baseline's
trust sentence, timings and the run directories (`result.baseline`, `result.target_run`) for
follow-up compare calls. Runs as a background job by default: small models answer in the
same call, otherwise follow `job_id` with job_result."""


def _fmt(x: Any) -> str:
    return f"{x:.2e}" if isinstance(x, int | float) else "n/a"


def summarize_baseline(r: dict[str, Any]) -> str:
    rep = r.get("report") or {}
    gate = rep.get("gate") or {}
    trusted = "TRUSTED" if rep.get("trusted") else "NOT TRUSTED"
    return (f"{trusted} baseline in {r.get('out')}: reference {rep.get('reference')}, fp16 floor {rep.get('floor')}, "
            f"MNN CPU gate {gate.get('status')} (max rel error {_fmt(gate.get('max_rel_error'))}). "
            f"{rep.get('sentence', '')}").strip() + (
        f" Inputs: {note}." if (note := (rep.get("inputs") or {}).get("note")) else "")


def summarize_dump(r: dict[str, Any]) -> str:
    qnn = f", {r['qnn_nodes']} nodes on QNN and none on CPU" if r.get("qnn_nodes") is not None else ""
    warn = f"; {len(r['warnings'])} warning(s)" if r.get("warnings") else ""
    return (f"{r.get('tensors')} tensors from {r.get('target')} {r.get('precision')} "
            f"(soc {r.get('soc_model')}, v{r.get('htp_arch')}){qnn} in {r.get('out')}{warn}")


def top_rows(compare: dict[str, Any], top: int) -> dict[str, Any]:
    """Keep the ``top`` tensors furthest beyond the fp16 floor (plus the first failing one), in execution
    order; the full table stays in the report files. ``tensors_total`` says how many there were."""
    rows: list[dict[str, Any]] = list(compare.get("tensors") or [])
    ff = compare.get("first_failing") or {}
    first = ff.get("observed_as") or ff.get("tensor")  # the row of the first failing tensor (maybe an alias row)
    ranked = sorted(rows, key=lambda r: -(r.get("excess_db") or 0.0))[:top]
    keep = {id(r) for r in ranked} | {id(r) for r in rows if r.get("name") == first}
    trimmed = dict(compare)
    trimmed["tensors"] = sorted((r for r in rows if id(r) in keep), key=lambda r: r.get("position", -1))
    trimmed["tensors_total"] = len(rows)
    return trimmed


def summarize_compare(r: dict[str, Any]) -> str:
    v = r.get("verdict") or {}
    pattern = f" ({v['pattern']})" if v.get("pattern") not in (None, "none") else ""
    text = f"verdict {v.get('kind')}{pattern}, confidence {v.get('confidence')}: {v.get('summary', '')}"
    if r.get("reference_trusted") is False:  # the summary opens with why: said before the verdict's name
        text = (f"{v.get('summary', '')} (verdict {v.get('kind')}{pattern}, confidence {v.get('confidence')}; "
                f"reference_trusted: false)")
    ff = r.get("first_failing")
    if ff:
        text += f" First failing: tensor {ff.get('tensor')!r} from {ff.get('op')} ({ff.get('op_type')}) at position {ff.get('position')}."
    return text + steps_text(r)


def steps_text(r: dict[str, Any]) -> str:
    """A result's structured next steps in one line: the MCP tool to call, the CLI line, why."""
    steps = r.get("next_steps") or []
    if not steps:
        return ""
    return " Next steps: " + " ".join(
        f"({i}) {'tool ' + s['tool'] + ', ' if s.get('tool') else ''}`{s.get('cli')}`: {s.get('why')}"
        for i, s in enumerate(steps, 1))


def summarize_diagnose(r: dict[str, Any]) -> str:
    trust = "trusted" if r.get("baseline_trusted") else "NOT trusted"
    fallback = r.get("fallback") or {}
    head = ""
    if fallback:
        head = f"Verdict from {r.get('method')} (the full dump was not used: {fallback.get('full_dump_not_used')}). "
    bisect = fallback.get("bisect")
    inputs = f" Inputs: {r['inputs_note']}." if r.get("inputs_note") else ""
    body = summarize_compare(r["compare"]) if r.get("compare") else (
        f"verdict {bisect.get('verdict')}: {bisect.get('summary')}{steps_text(bisect)}" if bisect else "no verdict")
    if not r.get("baseline_trusted"):  # first: the verdict may be the reference's error
        if (r.get("compare") or {}).get("reference_trusted") is False and not head:
            return f"{body} Runs in {r.get('out')}."  # the comparison's summary opens with it
        return f"Baseline NOT trusted: {r.get('baseline_sentence')} {head}{body} Runs in {r.get('out')}.{inputs}"
    return f"{head}{body} Baseline {trust}; runs in {r.get('out')}.{inputs}"


def trim_diagnose(r: dict[str, Any], top: int) -> dict[str, Any]:
    return {**r, "compare": top_rows(r["compare"], top) if r.get("compare") else None}


COMPARE_TARGETS = """After two runs of one model on two targets with the same inputs (e.g. diagnose on host and on
htp-sim: MNN's own QNN path and ONNX Runtime's QNN EP on the same simulator): each is compared with the same
`baseline` and the rows are joined by reference tensor. Names the first tensor where `target_a` is worse than
the fp16 floor allows and falls 6 dB behind `target_b` with a 3 dB step (the op to look at), or says the gap builds
up over many ops (precision spread over the graph, no single wrong op). Read-only."""


def summarize_compare_targets(r: dict[str, Any]) -> str:
    return str(r.get("summary", ""))


def register(server: MCPServer) -> None:
    publish(server, OpTool("baseline", "baseline", "Build the trusted CPU baseline", WRITES_RUNS, BASELINE,
                           summarize=summarize_baseline, long=True, auto_background=True,
                           job_title=lambda r: f"baseline of {model_stem(r)}"))
    publish(server, OpTool("dump", "dump_qnn", "Dump every QNN tensor", WRITES_RUNS_MAYBE_DEVICE, DUMP,
                           summarize=summarize_dump, long=True, auto_background=True,
                           job_title=lambda r: f"{getattr(r, 'target', '?')} dump of {model_stem(r)}"))
    publish(server, OpTool("compare", "compare", "Compare a QNN run with the baseline", WRITES_REPORT, COMPARE,
                           summarize=summarize_compare, long=True, top=True, transform=top_rows,
                           job_title=lambda r: f"compare of {model_stem(r, 'target')}"))
    publish(server, OpTool("compare_targets", "compare_targets", "Locate where one target loses against another",
                           READ_ONLY, COMPARE_TARGETS, summarize=summarize_compare_targets, long=True,
                           job_title=lambda r: f"compare of {model_stem(r, 'target_a')} and {model_stem(r, 'target_b')}"))
    publish(server, OpTool("diagnose", "diagnose", "Diagnose a model on QNN end to end", WRITES_RUNS_MAYBE_DEVICE,
                           DIAGNOSE, summarize=summarize_diagnose, long=True, auto_background=True, top=True,
                           transform=trim_diagnose,
                           job_title=lambda r: f"diagnose of {model_stem(r)} on {getattr(r, 'target', '?')}"))
