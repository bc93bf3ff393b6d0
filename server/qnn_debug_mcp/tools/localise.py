"""Localisation tools for when one all-tensor dump is impossible or untrustworthy: ``bisect``, ``localise_blocks``.

They run the engine CLI as a child process through the shared inline/job policy, like ``diagnose``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from ..args import Background, ClientRoots, InputsOrTestDir, OutPath, PathArg
from ..cli_child import engine_work
from ..long_runs import run_long
from ..models import LongToolAnswer
from ..target_options import Serial, TargetOptions, option_args
from ..tool_context import app_state, engine_roots, exec_workspace, new_output, tool, workspace
from .analysis import WRITES_RUNS_MAYBE_DEVICE, Arch, Seed, Shapes, Soc, Target, shape_args, steps_text

ReferenceModel = Annotated[str | None, Field(default=None, max_length=4096,
                                             description="The model the CPU reference runs (default: `model`); give "
                                             "the original when `model` is an edited copy.")]


def summarize_bisect(r: dict[str, Any]) -> str:
    probes = r.get("probes") or []
    text = f"verdict {r.get('verdict')} after {len(probes)} probes over {r.get('cut_points')} cuts: {r.get('summary', '')}"
    return f"{text}{steps_text(r)} Results in {r.get('out')}."


def register(server: MCPServer) -> None:
    register_bisect(server)
    register_blocks(server)


def register_bisect(server: MCPServer) -> None:
    @tool(server, title="Bisect to the first failing op (no dump needed)", annotations=WRITES_RUNS_MAYBE_DEVICE)
    async def bisect(
        model: PathArg,
        ctx: Context,
        roots: ClientRoots,
        target: Annotated[Target, Field(description="htp-sim (no phone needed), device (ModuleBasic over adb: "
                                        "QNN fp16 vs MNN CPU fp32, CPU fp16 as the floor) or host")] = "htp-sim",
        out: OutPath = None,
        reference_model: ReferenceModel = None,
        baseline: Annotated[str | None, Field(default=None, max_length=4096,
                                              description="reuse this baseline directory (htp-sim)")] = None,
        inputs: InputsOrTestDir = None,
        soc: Soc = 69,
        arch: Arch = None,
        shapes: Shapes = None,
        seed: Seed = 0,
        opencl: Annotated[bool, Field(description="device/host: OpenCL fp16 as a third opinion")] = False,
        mnn_gate: Annotated[bool, Field(description="htp-sim: cross-check the reference with MNN CPU")] = True,
        serial: Serial = None,
        options: Annotated[TargetOptions | None, Field(default=None, description="device/host settings")] = None,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """The fallback when no all-tensor dump is possible or trustworthy (LLM path without a dump
        switch, an old build answering 7004, a dump whose marking changes the graph): cuts the .onnx
        model after an op, runs the truncated model unmarked on the target, compares the cut's
        tensors with the CPU reference against the fp16 floor, and narrows in about log2(N) probes.
        Returns `result.first_failing` (op, op type, position, tensor, SQNR vs floor), the verdict
        (real_bug / precision / ok), every probe, and the first tensor beyond the fp16 range."""
        ws = workspace(ctx, roots)
        model_path = ws.resolve(model, what="model", kind="file")
        run_dir = new_output(ctx, ws, out, group=model_path.stem, leaf=f"bisect-{target}")
        cmd = ["bisect", str(model_path), "--target", target, "--out", str(run_dir), "--soc", str(soc),
               "--seed", str(seed), "--mnn-gate" if mnn_gate else "--no-mnn-gate", *shape_args(shapes)]
        if arch is not None:
            cmd += ["--arch", str(arch)]
        for flag, value, kind in (("--reference-model", reference_model, "file"), ("--baseline", baseline, "dir"),
                                  ("--inputs", inputs, "any")):
            if value:
                cmd += [flag, str(ws.resolve(value, what=flag[2:], kind=kind))]  # type: ignore[arg-type]
        if opencl:
            cmd.append("--opencl")
        cmd += option_args(options, ws, serial=serial, adb=app_state(ctx).config.adb, target=target)
        return await run_long(ctx, tool="bisect", title=f"bisect of {model_path.name} on {target}", work=engine_work(ctx, cmd),
                              background=background, auto_background=True, summarize=summarize_bisect)


def summarize_blocks(r: dict[str, Any]) -> str:
    return f"verdict {r.get('verdict')}: {r.get('summary', '')}{steps_text(r)} Results in {r.get('out')}."


def register_blocks(server: MCPServer) -> None:
    @tool(server, title="Localise the failing decoder block of an LLM", annotations=WRITES_RUNS_MAYBE_DEVICE)
    async def localise_blocks(
        model: PathArg,
        ctx: Context,
        roots: ClientRoots,
        target: Annotated[Target, Field(description="htp-sim (every block in one simulator session, no phone "
                                        "needed), device (each block's .mnn dumped with MNN2QNNModel "
                                        "--dump_intermediate_outputs and run on the phone over adb; options "
                                        "mnn2qnn and qnn_sdk) or host (a local MNN build)")] = "htp-sim",
        out: OutPath = None,
        reference_model: ReferenceModel = None,
        inputs: InputsOrTestDir = None,
        layers_per_block: Annotated[int, Field(ge=1, le=64, description="decoder layers cut out together")] = 1,
        inner: Annotated[Literal["diagnose", "bisect", "none"], Field(
            description="inside the first failing block: diagnose (dump + compare), bisect, or none")] = "diagnose",
        soc: Soc = 69,
        arch: Arch = None,
        shapes: Shapes = None,
        seed: Seed = 0,
        serial: Serial = None,
        options: Annotated[TargetOptions | None, Field(default=None, description="device/host settings")] = None,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """For LLM exports (node names with /layers.N/, e.g. llmexport's onnx/llm.onnx at the fixed
        prefill shape): cuts every decoder block out as a standalone graph, feeds it the hidden
        state the CPU reference computes at its input, runs each on the target and judges its
        outputs against the block's own fp16 floor; then finds the first failing op inside the
        first bad block (htp-sim: `inner`; device/host: the block's own dump compared tensor by tensor). Returns every block's worst excess, `first_failing_block`,
        `first_failing` (op inside it) and the first tensor beyond the fp16 range."""
        ws = workspace(ctx, roots)
        model_path = ws.resolve(model, what="model", kind="file")
        run_dir = new_output(ctx, ws, out, group=model_path.stem, leaf="blocks" if target == "htp-sim" else f"blocks-{target}")
        cmd = ["localise-blocks", str(model_path), "--target", target, "--out", str(run_dir), "--soc", str(soc),
               "--seed", str(seed),
               "--layers-per-block", str(layers_per_block), "--inner", inner, *shape_args(shapes)]
        if arch is not None:
            cmd += ["--arch", str(arch)]
        for flag, value, kind in (("--reference-model", reference_model, "file"), ("--inputs", inputs, "any")):
            if value:
                cmd += [flag, str(ws.resolve(value, what=flag[2:], kind=kind))]  # type: ignore[arg-type]
        cmd += option_args(options, ws, serial=serial, adb=app_state(ctx).config.adb, target=target,
                           exec_ws=exec_workspace(ctx))
        if target != "htp-sim":
            cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="localise_blocks", title=f"block localisation of {model_path.name}",
                              work=engine_work(ctx, cmd), background=background, auto_background=True, summarize=summarize_blocks)
