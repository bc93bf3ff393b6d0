"""Device tools: ``list_devices`` and ``probe_device`` (quick adb queries) and ``run_on_device`` (ModuleBasic).

The quick ones call the engine in a killable child process; every adb call there has its own timeout
(``--device-timeout``) and the whole call is killed at its limit, so a hung phone or adb costs seconds,
not the session, and leaves nothing running. ``run_on_device``
pushes and runs binaries, so it runs the engine CLI as a child process that a cancel kills.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from qnn_debug.device.probe import ProbeResult

from .. import quick_tasks
from ..args import Background, ClientRoots, InputsPath, OutPath, PathArg
from ..cli_child import engine_work
from ..long_runs import run_long
from ..models import LongToolAnswer
from ..target_options import DevicePath, Serial, TargetOptions, option_args
from ..tool_context import (
    app_state,
    engine_roots,
    exec_workspace,
    new_output,
    quick,
    respond,
    tool,
    workspace,
)
from ..workspace import PathKind
from .analysis import Seed, Shapes, shape_args

READS_DEVICE = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
RUNS_ON_DEVICE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                 open_world_hint=True)
QnnSdkArg = Annotated[str | None, Field(default=None, max_length=1024,
                                        description="Host path of the QNN/QAIRT SDK root, to fill in the adb push "
                                        "commands for missing QNN libraries")]
MnnBuildArg = Annotated[str | None, Field(default=None, max_length=1024,
                                          description="Host path of your Android MNN build dir (ModuleBasic.out, "
                                          "libMNN.so), to fill in the adb push commands")]
NdkArg = Annotated[str | None, Field(default=None, max_length=1024,
                                     description="Host path of the Android NDK, to fill in the adb push for "
                                     "libc++_shared.so")]
TestDirArg = Annotated[str | None, Field(default=None, max_length=4096,
                                         description="An MNN test dir inside the workspace (input.json + <tensor>.txt "
                                         "inputs and references) to run")]
BaselineArg = Annotated[str | None, Field(default=None, max_length=4096,
                                          description="A baseline directory inside the workspace whose inputs and fp32 "
                                          "reference outputs to use")]


class Device(BaseModel):
    serial: str
    state: str = Field(description="device (ready), unauthorized, offline, no permissions, ...")
    details: dict[str, str] = Field(default_factory=dict)


class DeviceList(BaseModel):
    devices: list[Device]
    ready: list[str] = Field(description="serials in state 'device', usable now")
    next_step: str


class DeviceProbe(ProbeResult):
    """The engine's probe result plus the names of the missing files."""

    missing_files: list[str] = Field(default_factory=list, description="names of the files still to push")


def register(server: MCPServer) -> None:
    @tool(server, title="List Android devices (adb)", annotations=READS_DEVICE)
    async def list_devices(ctx: Context) -> Annotated[CallToolResult, DeviceList]:
        """List the phones adb sees and their state (device = ready, unauthorized = accept the RSA
        prompt on the phone, offline). Call before probe_device / run_on_device / dump_qnn with
        target=device, and pass the chosen `serial` to them."""
        cfg = app_state(ctx).config
        found = await quick(ctx, quick_tasks.devices, cfg.adb or "adb", cfg.device_timeout_s, limit_s=cfg.device_timeout_s + 5,
                            what="adb devices")
        devices = [Device.model_validate(d) for d in found["devices"]]
        ready = list(found["ready"])
        step = ("call probe_device with one of the ready serials" if ready else
                "connect a phone with USB debugging on (or accept its RSA prompt) and call list_devices again")
        answer = DeviceList(devices=devices, ready=ready, next_step=step)
        summary = ", ".join(f"{d.serial} ({d.state})" for d in devices) or "no device connected"
        return respond(answer, summary)

    @tool(server, title="Check a phone's QNN setup", annotations=READS_DEVICE)
    async def probe_device(
        ctx: Context,
        serial: Serial = None,
        mnn_dir: DevicePath = None,
        mode: Annotated[Literal["offline", "online"], Field(description="offline: MNN2QNNModel models; online: "
                                                            "graphs built on the phone")] = "offline",
        qnn_sdk: QnnSdkArg = None,
        mnn_build: MnnBuildArg = None,
        ndk: NdkArg = None,
    ) -> Annotated[CallToolResult, DeviceProbe]:
        """Ask a phone for its SoC (soc_id) and HTP arch, and check that every file MNN's QNN backend
        needs is in `mnn_dir` (ModuleBasic.out, libMNN.so, libQnnHtp.so, libQnnHtpV<arch>Stub/Skel,
        libQnnSystem.so, libc++_shared.so). Each missing file comes with the exact `adb push` that
        fixes it (give qnn_sdk / mnn_build / ndk, host paths, to fill them in). `ready` says whether
        run_on_device and dump_qnn target=device can work."""
        cfg = app_state(ctx).config
        result = await quick(ctx, quick_tasks.probe, limit_s=cfg.device_timeout_s * 4 + 5, what="probing the phone",
                             serial=serial, adb=cfg.adb or "adb", mnn_dir=mnn_dir, mode=mode, qnn_sdk=qnn_sdk,
                             mnn_build=mnn_build, ndk=ndk, timeout=cfg.device_timeout_s)
        answer = DeviceProbe(**result.model_dump(), missing_files=[f.name for f in result.missing])
        soc = f"{answer.soc_name} (soc {answer.soc_id}, v{answer.htp_arch})" if answer.soc_id else "unknown SoC"
        state = "ready" if answer.ready else f"not ready; missing {', '.join(answer.missing_files) or 'SoC info'}"
        return respond(answer, f"{answer.serial}: {answer.model or '?'}, {soc}; {state}")

    @tool(server, title="Run a model with ModuleBasic on a phone or host build", annotations=RUNS_ON_DEVICE)
    async def run_on_device(
        model: PathArg,
        ctx: Context,
        roots: ClientRoots,
        target: Annotated[Literal["device", "host"], Field(description="device: phone over adb; host: local MNN "
                                                           "build (options.mnn_build_dir)")] = "device",
        forward: Annotated[Literal["qnn", "cpu", "opencl"], Field(description="MNN forward type: qnn (5), cpu (0), "
                                                                  "opencl (3)")] = "qnn",
        precision: Annotated[Literal["low", "high", "normal"], Field(description="low = fp16; high = fp32 tensors on CPU/OpenCL, but HTP still computes in fp16")] = "low",
        testdir: TestDirArg = None,
        baseline: BaselineArg = None,
        inputs: InputsPath = None,
        shapes: Shapes = None,
        seed: Seed = 0,
        serial: Serial = None,
        out: OutPath = None,
        options: Annotated[TargetOptions | None, Field(default=None, description="device/host settings")] = None,
        background: Background = None,
    ) -> Annotated[CallToolResult, LongToolAnswer]:
        """Run an .mnn model (or an MNN2QNNModel wrapper) with MNN's own ModuleBasic.out on a phone
        (target=device) or a local MNN build (target=host), exactly as MNN's test does, and judge the
        outputs against the reference: `result.status` (passed/failed), `result.reason`, per-output
        relative errors, ops that fell back to CPU (`report.not_registered`) and the run directory.
        ModuleBasic itself always exits 0, so read the status here. Give a `testdir` (input.json +
        txt files; see toggle_shapeMutable) or a `baseline` directory for inputs and references."""
        ws = workspace(ctx, roots)
        model_path = ws.resolve(model, what="model", kind="file")
        cmd = ["run", str(model_path), "--target", target, "--forward", forward, "--precision", precision,
               "--out", str(new_output(ctx, ws, out, group=model_path.stem, leaf=f"{target}-run")), "--seed", str(seed),
               *shape_args(shapes)]
        paths: list[tuple[str, str | None, PathKind]] = [("testdir", testdir, "dir"), ("baseline", baseline, "dir"),
                                                         ("inputs", inputs, "file")]
        for name, value, kind in paths:
            if value:
                cmd += [f"--{name}", str(ws.resolve(value, what=name, kind=kind))]
        cmd += option_args(options, ws, serial=serial, adb=app_state(ctx).config.adb, target=target,
                           exec_ws=exec_workspace(ctx))
        cmd += engine_roots(ctx, ws)
        return await run_long(ctx, tool="run_on_device", title=f"ModuleBasic {target} run of {model_path.name}",
                              work=engine_work(ctx, cmd), background=background, auto_background=False, summarize=summarize_run)


def summarize_run(r: dict[str, Any]) -> str:
    status = str(r.get("status", "?")).upper()
    fallback = (r.get("report") or {}).get("not_registered") or []
    extra = f"; {len(fallback)} op(s) ran on CPU" if fallback else ""
    return f"{status}: {r.get('reason', '')}{extra} (run directory {r.get('out')})"
