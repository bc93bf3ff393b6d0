"""Settings of the ``device`` and ``host`` targets, validated here and passed as ``--option key=value``.

Host paths among them are confined to the workspace like every other file argument. The ones the
engine *executes or loads as native code* (``mnn2qnn``, ``mnn_build_dir``, ``qnn_sdk``, ``qnn_lib_dir``)
must lie in folders the operator configured (``--exec-root``, else the ``--root`` folders in stdio mode;
in HTTP mode only ``--exec-root``), never in a root a client offered. ``adb`` is never taken from the
model: it is the operator's ``--adb`` choice.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import tool_error
from .workspace import PathKind, Workspace

SERIAL_PATTERN = r"^[A-Za-z0-9._:\-\[\]@]+$"
Serial = Annotated[str | None, Field(default=None, max_length=128, pattern=SERIAL_PATTERN,
                                     description="adb serial of the phone (see list_devices); needed when several are attached")]
HostPath = Annotated[str | None, Field(default=None, max_length=4096)]
DevicePath = Annotated[str | None, Field(default=None, max_length=512, pattern=r"^/[A-Za-z0-9._/+-]*$",
                                         description="device directory with ModuleBasic.out, libMNN*.so and the QNN libs")]


class TargetOptions(BaseModel):
    """Optional settings for target=device / target=host; omit everything for the defaults."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "online", "offline"] | None = Field(
        None, description="online: MNN's QNN backend builds the graph at run time; offline: an MNN2QNNModel "
        "context binary (dumps every tensor); auto: decide from the model")
    mnn_dir: DevicePath = None
    source_model: HostPath = Field(None, description="the .mnn given to MNN2QNNModel when `model` is its wrapper")
    plugin_model: HostPath = Field(None, description="a prebuilt <base>_<soc>_<arch>.mnn (its .bin beside it)")
    mnn2qnn: HostPath = Field(None, description="MNN2QNNModel executable (x86_64 host) for offline runs")
    qnn_sdk: HostPath = Field(None, description="QNN/QAIRT SDK root")
    mnn_build_dir: HostPath = Field(None, description="local MNN build with ModuleBasic.out (target=host)")
    qnn_lib_dir: HostPath = Field(None, description="directory with the QNN libraries (target=host)")
    keep: bool | None = Field(None, description="keep the run directory on the target")
    loops: int | None = Field(None, ge=0, le=1000, description="extra timed forwards (ModuleBasic runLoops)")
    threads: int | None = Field(None, ge=1, le=64)


PATH_OPTIONS: dict[str, PathKind] = {"source_model": "file", "plugin_model": "file", "mnn2qnn": "file",
                                     "qnn_sdk": "dir", "mnn_build_dir": "dir", "qnn_lib_dir": "dir"}
EXECUTABLE_OPTIONS = frozenset({"mnn2qnn", "qnn_sdk", "mnn_build_dir", "qnn_lib_dir"})


def option_args(options: TargetOptions | None, ws: Workspace, *, serial: str | None, adb: str | None,
                target: str, exec_ws: Workspace | None = None) -> list[str]:
    """``--option key=value`` arguments for the engine (empty for htp-sim)."""
    if target == "htp-sim":
        if serial or (options and options.model_dump(exclude_none=True)):
            raise tool_error("serial and options apply to target=device or target=host only",
                             "drop them, or choose target device/host")
        return []
    values: dict[str, str] = {}
    for key, value in (options.model_dump(exclude_none=True) if options else {}).items():
        if key in EXECUTABLE_OPTIONS:
            if exec_ws is None:
                raise tool_error(f"options.{key} names native code, which this server only runs from folders its "
                                 "operator configured, and none is configured",
                                 "ask the operator to restart the server with --exec-root DIR for your MNN/QNN builds")
            values[key] = str(exec_ws.resolve(value, what=f"options.{key}", kind=PATH_OPTIONS[key]))
        elif key in PATH_OPTIONS:
            values[key] = str(ws.resolve(value, what=f"options.{key}", kind=PATH_OPTIONS[key]))
        elif key == "mnn_dir" and ".." in value.split("/"):
            raise tool_error("options.mnn_dir contains '..'", "give the device directory as a plain absolute path")
        else:
            values[key] = str(value).lower() if isinstance(value, bool) else str(value)
    if serial:
        values["serial"] = serial
    if adb and target == "device":
        values["adb"] = adb
    args: list[str] = []
    for key, value in values.items():
        args += ["--option", f"{key}={value}"]
    return args
