"""Settings of the ``device`` and ``host`` targets as one typed model, and how ``--option key=value`` reads into it.

The host paths among them carry :class:`~.fields.PathRole`: the ones the engine *executes or loads as native
code* (``mnn2qnn``, ``qnn_sdk``, ``mnn_build_dir``, ``qnn_lib_dir``, and ``mnn_source_dir``, whose headers are
compiled into the host's runner) have ``role="exec"``, so the MCP server
takes them only from folders its operator configured. ``serial`` and ``adb`` are fields of the request itself
(``adb`` is the operator's choice, never a client's); keys the MCP server does not offer (simulator provider
options, ``disabled_optimizers``, ...) are kept as ``extra_options`` and checked by the target that reads them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import BadInputError
from .fields import PathRole

SERIAL_PATTERN = r"^[A-Za-z0-9._:\-\[\]@]+$"
DEVICE_PATH_PATTERN = r"^/[A-Za-z0-9._/+-]*$"

HostPath = Annotated[str | None, Field(default=None, max_length=4096)]
DevicePath = Annotated[str | None, Field(default=None, max_length=512, pattern=DEVICE_PATH_PATTERN,
                                         description="device directory with ModuleBasic.out, libMNN*.so and the QNN libs")]


class TargetOptions(BaseModel):
    """Optional settings for target=device / target=host; omit everything for the defaults."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "online", "offline"] | None = Field(
        None, description="online: MNN's QNN backend builds the graph at run time; offline: an MNN2QNNModel "
        "context binary (dumps every tensor); auto: decide from the model")
    mnn_dir: DevicePath = None
    source_model: Annotated[HostPath, PathRole("file")] = Field(
        None, description="the .mnn given to MNN2QNNModel when `model` is its wrapper")
    plugin_model: Annotated[HostPath, PathRole("file")] = Field(
        None, description="a prebuilt <base>_<soc>_<arch>.mnn (its .bin beside it)")
    mnn2qnn: Annotated[HostPath, PathRole("file", role="exec")] = Field(
        None, description="MNN2QNNModel executable (x86_64 host) for offline runs")
    qnn_sdk: Annotated[HostPath, PathRole("dir", role="exec")] = Field(None, description="QNN/QAIRT SDK root")
    mnn_build_dir: Annotated[HostPath, PathRole("dir", role="exec")] = Field(
        None, description="local MNN build (-DMNN_QNN=ON) with libMNN.so, and ModuleBasic.out for run/probes (target=host)")
    mnn_source_dir: Annotated[HostPath, PathRole("dir", role="exec")] = Field(
        None, description="MNN's source folder (its include/) when the build's CMakeCache.txt does not name it "
        "(target=host: the all-tensor runner is compiled against it)")
    qnn_lib_dir: Annotated[HostPath, PathRole("dir", role="exec")] = Field(
        None, description="directory with the QNN libraries (target=host)")
    keep: bool | None = Field(None, description="keep the run directory on the target")
    loops: int | None = Field(None, ge=0, le=1000, description="extra timed forwards (ModuleBasic runLoops)")
    threads: int | None = Field(None, ge=1, le=64)


OWN_FIELDS = ("serial", "adb")  # ``--option serial=...`` / ``adb=...`` fill the request's own fields


def parse_option_pairs(pairs: list[str] | None) -> dict[str, Any]:
    """``--option key=value`` pairs → ``options`` (typed), ``extra_options`` (target-specific keys) and the
    request's own ``serial``/``adb``. A pair without ``=`` or a typed key with a bad value is a typed error."""
    typed: dict[str, str] = {}
    extra: dict[str, str] = {}
    own: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise BadInputError(f"cannot read --option {pair!r}", hint="write it as key=value, e.g. --option serial=R58M123")
        if key in OWN_FIELDS:
            own[key] = value
        elif key in TargetOptions.model_fields:
            typed[key] = value
        else:
            extra[key] = value
    try:
        options = TargetOptions.model_validate(typed) if typed else None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise BadInputError(f"invalid --option {where}={typed.get(where, '')!r}: {first.get('msg', 'invalid value')}",
                            hint="typed keys: " + ", ".join(TargetOptions.model_fields)) from None
    out: dict[str, Any] = {**own}
    if options is not None:
        out["options"] = options
    if extra:
        out["extra_options"] = extra
    return out


def engine_options(options: TargetOptions | None, extra: dict[str, str] | None, *, target: str,
                   serial: str | None, adb: str | None) -> dict[str, str]:
    """The targets' ``key=value`` settings (``DumpRequest.options``) from a request's typed fields.

    ``serial`` and ``options`` apply to the device and host targets only; ``adb`` only to the device."""
    from ..targets import TARGETS
    from ..targets import target as get_target

    typed = options.model_dump(exclude_none=True) if options is not None else {}
    if not get_target(target).capabilities.takes_settings and (serial or typed):
        takers = [n for n in TARGETS if get_target(n).capabilities.takes_settings]
        raise BadInputError(f"serial and options apply to {' or '.join(f'target={n}' for n in takers)} only",
                            hint=f"drop them, or choose target {'/'.join(takers)}")
    values: dict[str, str] = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in typed.items()}
    if typed.get("mnn_dir") is not None and ".." in str(typed["mnn_dir"]).split("/"):
        raise BadInputError("options.mnn_dir contains '..'", hint="give the device directory as a plain absolute path")
    values.update(extra or {})
    if serial:
        values["serial"] = serial
    if adb and get_target(target).capabilities.over_adb:
        values["adb"] = adb
    return values
