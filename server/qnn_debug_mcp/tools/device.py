"""Device tools: ``list_devices`` and ``probe_device`` (quick adb queries) and ``run_on_device`` (ModuleBasic).

The quick ones run their engine operation in a killable child; every adb call there has its own timeout
(``--device-timeout``) and the whole call is killed at its limit, so a hung phone or adb costs seconds,
not the session, and leaves nothing running. ``run_on_device`` pushes and runs binaries under the shared
inline/job policy; a cancel kills its child with everything it started.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from qnn_debug.device.probe import ProbeResult
from qnn_debug.device_models import AdbDevice, DevicesResult

from ..config import ServerConfig
from ..publish import OpTool, model_stem, publish

READS_DEVICE = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
RUNS_ON_DEVICE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                 open_world_hint=True)

LIST = """List the phones adb sees and their state (device = ready, unauthorized = accept the RSA
prompt on the phone, offline). Call before probe_device / run_on_device / dump_qnn with
target=device, and pass the chosen `serial` to them."""

PROBE = """Ask a phone for its SoC (soc_id) and HTP arch, and check that every file MNN's QNN backend
needs is in `mnn_dir` (ModuleBasic.out, libMNN.so, libQnnHtp.so, libQnnHtpV<arch>Stub/Skel,
libQnnSystem.so, libc++_shared.so). Each missing file comes with the exact `adb push` that
fixes it (give qnn_sdk / mnn_build / ndk, host paths, to fill them in). `ready` says whether
run_on_device and dump_qnn target=device can work."""

RUN = """Run an .mnn model (or an MNN2QNNModel wrapper) with MNN's own ModuleBasic.out on a phone
(target=device) or a local MNN build (target=host), exactly as MNN's test does, and judge the
outputs against the reference: `result.status` (passed/failed), `result.reason`, per-output
relative errors, ops that fell back to CPU (`report.not_registered`) and the run directory.
ModuleBasic itself always exits 0, so read the status here. Give a `testdir` (input.json +
txt files; see toggle_shapeMutable) or a `baseline` directory for inputs and references."""


class DeviceList(BaseModel):
    """The engine's device list, typed, plus what to call next."""

    devices: list[AdbDevice]
    ready: list[str] = Field(description="serials in state 'device', usable now")
    next_step: str


class DeviceProbe(ProbeResult):
    """The engine's probe result plus the names of the missing files."""

    missing_files: list[str] = Field(default_factory=list, description="names of the files still to push")


def device_list(result: BaseModel) -> DeviceList:
    assert isinstance(result, DevicesResult)
    ready = list(result.ready)
    step = ("call probe_device with one of the ready serials" if ready else
            "connect a phone with USB debugging on (or accept its RSA prompt) and call list_devices again")
    return DeviceList(devices=list(result.devices), ready=ready, next_step=step)


def summarize_list(answer: DeviceList) -> str:
    return ", ".join(f"{d.serial} ({d.state})" for d in answer.devices) or "no device connected"


def device_probe(result: BaseModel) -> DeviceProbe:
    assert isinstance(result, ProbeResult)
    return DeviceProbe(**result.model_dump(), missing_files=[f.name for f in result.missing])


def summarize_probe(answer: DeviceProbe) -> str:
    soc = f"{answer.soc_name} (soc {answer.soc_id}, v{answer.htp_arch})" if answer.soc_id else "unknown SoC"
    state = "ready" if answer.ready else f"not ready; missing {', '.join(answer.missing_files) or 'SoC info'}"
    return f"{answer.serial}: {answer.model or '?'}, {soc}; {state}"


def list_limit(config: ServerConfig, request: BaseModel) -> float:
    return config.device_timeout_s + 5


def probe_limit(config: ServerConfig, request: BaseModel) -> float:
    """A probe asks the phone a few things (getprop, ls of the runtime folder), each bounded by --device-timeout."""
    return config.device_timeout_s * 4 + 5


def summarize_run(r: dict[str, Any]) -> str:
    status = str(r.get("status", "?")).upper()
    fallback = (r.get("report") or {}).get("not_registered") or []
    extra = f"; {len(fallback)} op(s) ran on CPU" if fallback else ""
    return f"{status}: {r.get('reason', '')}{extra} (run directory {r.get('out')})"



def register(server: MCPServer) -> None:
    publish(server, OpTool("devices", "list_devices", "List Android devices (adb)", READS_DEVICE, LIST,
                           summarize=summarize_list, answer=DeviceList, shape=device_list, limit=list_limit))
    publish(server, OpTool("probe_device", "probe_device", "Check a phone's QNN setup", READS_DEVICE, PROBE,
                           summarize=summarize_probe, answer=DeviceProbe, shape=device_probe, limit=probe_limit))
    publish(server, OpTool("run", "run_on_device", "Run a model with ModuleBasic on a phone or host build",
                           RUNS_ON_DEVICE, RUN, summarize=summarize_run, long=True,
                           job_title=lambda r: f"ModuleBasic {getattr(r, 'target', '?')} run of {model_stem(r)}"))
