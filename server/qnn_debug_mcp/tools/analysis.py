"""Numerical analysis tools: ``baseline``, ``dump_qnn``, ``compare``, ``diagnose``.

Each one runs the engine CLI as a child process (see :mod:`..engine` for why) through the shared
inline/job policy in :mod:`..long_runs`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from qnn_debug.mnn.soc import DEFAULT_SOC, default_soc_help

from ..args import Background, ClientRoots, InputsOrTestDir, OutPath, PathArg
from ..cli_child import engine_work
from ..errors import tool_error
from ..long_runs import run_long
from ..models import LongToolAnswer
from ..target_options import Serial, TargetOptions, option_args
from ..tool_context import app_state, engine_roots, exec_workspace, new_output, tool, workspace

Target = Literal["htp-sim", "device", "host"]
Shapes = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=256)],
         Annotated[list[Annotated[int, Field(ge=1, le=1_000_000)]], Field(min_length=1, max_length=8)]] | None,
    Field(default=None, max_length=64,
          description='Fix dynamic input shapes, e.g. {"x": [1, 3, 224, 224]}; omit to use the model\'s own.'),
]
Seed = Annotated[int, Field(ge=0, le=2**31 - 1, description="Seed of the generated inputs (ignored with `inputs`).")]
Soc = Annotated[int, Field(ge=1, le=1000, description=f"QNN soc_model, e.g. {default_soc_help()}, 57 = 8 Gen 3, "
                                                        "43 = 8 Gen 2; decides the HTP's numerics.")]
OnnxModelPath = Annotated[str | None, Field(default=None, max_length=4096,
                                            description="The reference's .onnx model, used to re-run suspect ops on "
                                            "CPU; omit to use the one recorded in the baseline.")]
MnnModelPath = Annotated[str | None, Field(default=None, max_length=4096,
                                           description="The source .mnn of an MNN QNN dump (maps t<N> names to model "
                                           "tensors and restores layouts); omit to use the baseline's.")]
ReportDir = Annotated[str | None, Field(default=None, max_length=4096,
                                        description="Directory for compare.md, compare.json and the plot; omit for a "
                                        "fresh one under qnn-debug-runs/compare/.")]
Arch = Annotated[int | None, Field(default=None, ge=60, le=99, description="HTP arch without the 'v' (e.g. 75); "
                                                                            "omit for the SoC's own.")]

WRITES_RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
WRITES_REPORT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                open_world_hint=False)  # each call writes a new report directory
WRITES_RUNS_MAYBE_DEVICE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                           open_world_hint=True)


def shape_args(shapes: dict[str, list[int]] | None) -> list[str]:
    out: list[str] = []
    for name, dims in (shapes or {}).items():
        if "=" in name:
            raise tool_error(f"input name {name!r} contains '='", "pass the input's exact name from the model")
        out += ["--shape", f"{name}={'x'.join(str(d) for d in dims)}"]
    return out


def _fmt(x: Any) -> str:
    return f"{x:.2e}" if isinstance(x, int | float) else "n/a"


def summarize_baseline(r: dict[str, Any]) -> str:
    rep = r.get("report") or {}
    gate = rep.get("gate") or {}
    trusted = "TRUSTED" if rep.get("trusted") else "NOT TRUSTED"
    return (f"{trusted} baseline in {r.get('out')}: reference {rep.get('reference')}, fp16 floor {rep.get('floor')}, "
            f"MNN CPU gate {gate.get('status')} (max rel error {_fmt(gate.get('max_rel_error'))}). "
            f"{rep.get('sentence', '')}").strip()


def summarize_dump(r: dict[str, Any]) -> str:
    qnn = f", {r['qnn_nodes']} nodes on QNN and none on CPU" if r.get("qnn_nodes") is not None else ""
    warn = f"; {len(r['warnings'])} warning(s)" if r.get("warnings") else ""
    return (f"{r.get('tensors')} tensors from {r.get('target')} {r.get('precision')} "
            f"(soc {r.get('soc_model')}, v{r.get('htp_arch')}){qnn} in {r.get('out')}{warn}")


def register(server: MCPServer) -> None:
    register_runs(server)
    register_compare(server)


def register_runs(server: MCPServer) -> None:
    @tool(server, title="Build the trusted CPU baseline", annotations=WRITES_RUNS)
    async def baseline(
        model: PathArg,
        ctx: Context,
        roots: ClientRoots,
        out: OutPath = None,
        inputs: InputsOrTestDir = None,
        shapes: Shapes = None,
        seed: Seed = 0,
        mnn_gate: Annotated[bool, Field(description="Cross-check ONNX Runtime against MNN CPU (the trust gate)")] = True,
        mnn_model: Annotated[str | None, Field(default=None, max_length=4096, description=(
            "Your own .mnn of this ONNX model (inside the workspace): it is gated against the reference too, and "
            "the report says whether it differs from the .mnn converted here"))] = None,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """Step 1 of numerical debugging. Runs the model (.onnx or .mnn) on CPU in fp32 and keeps
        EVERY intermediate tensor (the reference), an fp16 "floor" (the error fp16 alone causes) and
        an MNN-CPU cross-check that says whether the reference can be trusted. Returns the baseline
        directory (`result.out`), `result.report.trusted` and the inputs file that dump_qnn should
        reuse. Runs as a background job by default (seconds for small models, minutes for big ones):
        if `status` is running, follow `job_id` with job_result."""
        ws = workspace(ctx, roots)
        model_path = ws.resolve(model, what="model", kind="file")
        cmd = ["baseline", str(model_path), "--out", str(new_output(ctx, ws, out, group=model_path.stem, leaf="baseline")),
               "--seed", str(seed), "--mnn-gate" if mnn_gate else "--no-mnn-gate", *shape_args(shapes)]
        if inputs:
            cmd += ["--inputs", str(ws.resolve(inputs, what="inputs", kind="any"))]
        if mnn_model:
            cmd += ["--mnn-model", str(ws.resolve(mnn_model, what="mnn_model", kind="file"))]
        cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="baseline", title=f"baseline of {model_path.name}", work=engine_work(ctx, cmd),
                              background=background, auto_background=True, summarize=summarize_baseline)

    @tool(server, title="Dump every QNN tensor", annotations=WRITES_RUNS_MAYBE_DEVICE)
    async def dump_qnn(
        model: PathArg,
        ctx: Context,
        roots: ClientRoots,
        target: Annotated[Target, Field(description="htp-sim: Qualcomm's HTP simulator on this machine (no phone "
                                        "needed); device: MNN's QNN backend on an Android phone over adb; host: a "
                                        "local MNN build")] = "htp-sim",
        out: OutPath = None,
        inputs: InputsOrTestDir = None,
        precision: Annotated[Literal["fp16", "quantized"], Field(description="fp16, or quantized for QDQ models")] = "fp16",
        soc: Soc = DEFAULT_SOC,
        arch: Arch = None,
        shapes: Shapes = None,
        seed: Seed = 0,
        serial: Serial = None,
        options: Annotated[TargetOptions | None, Field(default=None, description="device/host settings")] = None,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """Step 2: run the model on a QNN target and capture EVERY intermediate tensor in one run,
        refusing any silent CPU fallback. Returns the run directory (`result.out`), tensor counts and
        the observer effect of marking all tensors as outputs. Pass the baseline's inputs.npz as
        `inputs`. Runs as a background job by default: follow `job_id` with job_result."""
        ws = workspace(ctx, roots)
        model_path = ws.resolve(model, what="model", kind="file")
        run_dir = new_output(ctx, ws, out, group=model_path.stem, leaf=f"{target}-{precision}")
        cmd = ["dump", str(model_path), "--target", target, "--out", str(run_dir), "--precision", precision,
               "--soc", str(soc), "--seed", str(seed), *shape_args(shapes)]
        if arch is not None:
            cmd += ["--arch", str(arch)]
        if inputs:
            cmd += ["--inputs", str(ws.resolve(inputs, what="inputs", kind="any"))]
        cmd += option_args(options, ws, serial=serial, adb=app_state(ctx).config.adb, target=target,
                           exec_ws=exec_workspace(ctx))
        cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="dump_qnn", title=f"{target} dump of {model_path.name}", work=engine_work(ctx, cmd),
                              background=background, auto_background=True, summarize=summarize_dump)


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
    body = summarize_compare(r["compare"]) if r.get("compare") else (
        f"verdict {bisect.get('verdict')}: {bisect.get('summary')}{steps_text(bisect)}" if bisect else "no verdict")
    return f"{head}{body} Baseline {trust}; runs in {r.get('out')}."


def register_compare(server: MCPServer) -> None:
    @tool(server, title="Compare a QNN run with the baseline", annotations=WRITES_REPORT)
    async def compare(
        reference: PathArg,
        target: PathArg,
        ctx: Context,
        roots: ClientRoots,
        model: OnnxModelPath = None,
        mnn_model: MnnModelPath = None,
        execution: Annotated[int | None, Field(default=None, ge=0, description="which execution of an MNN dump "
                                               "(default: the newest)")] = None,
        report_dir: ReportDir = None,
        local_checks: Annotated[bool, Field(description="re-run suspect ops on CPU with the target's own inputs "
                                            "(slower, tells a wrong op from inherited error)")] = True,
        top: Annotated[int, Field(ge=1, le=200, description="how many tensor rows to return")] = 15,
        fp16_codes: Annotated[Literal["htp", "ieee"], Field(description="how an MNN dump's fp16 buffers read "
                              "exponent-31 codes: htp (finite up to 131008; HTP has no inf/NaN) or ieee (an IEEE-fp16 "
                              "producer)")] = "htp",
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """Step 3: compare a QNN run with the baseline tensor by tensor. `reference` is the baseline
        directory (or a reference run); `target` is a dump_qnn/run_on_device run directory, an MNN
        QNN dump directory (manifest_*.tsv + .raw; give `mnn_model` to name t<N> tensors) or an .npz.
        Returns `result.first_failing` (tensor, op, op type, position, local error), `result.verdict`
        (kind ok / precision / quantization / real_bug / input_not_copied, pattern, confidence,
        summary, evidence), the `top` worst tensor rows against the fp16 floor, and `report_uri`
        (the full Markdown report; the table, JSON and an error-by-position plot are resources too)."""
        ws = workspace(ctx, roots)
        ref = ws.resolve(reference, what="reference", kind="any")
        tgt = ws.resolve(target, what="target", kind="any")
        report = new_output(ctx, ws, report_dir, group="compare", leaf=tgt.name, what="report_dir")
        cmd = ["compare", str(ref), str(tgt), "--report", str(report)]
        for flag, value in (("--model", model), ("--mnn-model", mnn_model)):
            if value:
                cmd += [flag, str(ws.resolve(value, what=flag[2:], kind="file"))]
        if execution is not None:
            cmd += ["--execution", str(execution)]
        if not local_checks:
            cmd.append("--no-local")
        if fp16_codes != "htp":
            cmd += ["--fp16-codes", fp16_codes]
        cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="compare", title=f"compare of {tgt.name}",
                              work=engine_work(ctx, cmd, lambda r: top_rows(r, top)), background=background,
                              auto_background=False, summarize=summarize_compare)

    @tool(server, title="Diagnose a model on QNN end to end", annotations=WRITES_RUNS_MAYBE_DEVICE)
    async def diagnose(
        model: PathArg,
        ctx: Context,
        roots: ClientRoots,
        target: Annotated[Target, Field(description="htp-sim (no phone needed), device or host")] = "htp-sim",
        out: OutPath = None,
        inputs: InputsOrTestDir = None,
        precision: Annotated[Literal["fp16", "quantized"], Field(description="fp16, or quantized for QDQ models")] = "fp16",
        soc: Soc = DEFAULT_SOC,
        arch: Arch = None,
        shapes: Shapes = None,
        seed: Seed = 0,
        mnn_gate: Annotated[bool, Field(description="cross-check the reference with MNN CPU")] = True,
        serial: Serial = None,
        options: Annotated[TargetOptions | None, Field(default=None, description="device/host settings")] = None,
        top: Annotated[int, Field(ge=1, le=200, description="how many tensor rows to return")] = 15,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """All of baseline + dump_qnn + compare in one call for an .onnx model: the first failing
        op and the verdict (real bug vs fp16/quantization error) with the evidence, the baseline's
        trust sentence, timings and the run directories (`result.baseline`, `result.target_run`) for
        follow-up compare calls. Runs as a background job by default: small models answer in the
        same call, otherwise follow `job_id` with job_result."""
        ws = workspace(ctx, roots)
        model_path = ws.resolve(model, what="model", kind="file")
        run_dir = new_output(ctx, ws, out, group=model_path.stem, leaf=f"diagnose-{target}")
        cmd = ["diagnose", str(model_path), "--target", target, "--out", str(run_dir), "--precision", precision,
               "--soc", str(soc), "--seed", str(seed), "--mnn-gate" if mnn_gate else "--no-mnn-gate",
               *shape_args(shapes)]
        if arch is not None:
            cmd += ["--arch", str(arch)]
        if inputs:
            cmd += ["--inputs", str(ws.resolve(inputs, what="inputs", kind="any"))]
        cmd += option_args(options, ws, serial=serial, adb=app_state(ctx).config.adb, target=target,
                           exec_ws=exec_workspace(ctx))

        def trim(r: dict[str, Any]) -> dict[str, Any]:
            return {**r, "compare": top_rows(r["compare"], top) if r.get("compare") else None}

        cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="diagnose", title=f"diagnose of {model_path.name} on {target}",
                              work=engine_work(ctx, cmd, trim), background=background, auto_background=True,
                              summarize=summarize_diagnose)
