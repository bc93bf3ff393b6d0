"""What the device operations return (pydantic only; :mod:`qnn_debug.device_ops` re-exports them)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .mnn.models import ModuleBasicReport


class AdbDevice(BaseModel):
    """One line of ``adb devices -l``."""

    serial: str
    state: str = Field(description="device, unauthorized, offline, no permissions, recovery, ...")
    details: dict[str, str] = Field(default_factory=dict, description="model, product, device, transport_id")


class DevicesResult(BaseModel):
    devices: list[AdbDevice]
    ready: list[str] = Field(default_factory=list)


class RunModelResult(BaseModel):
    """A ModuleBasic run: MNN's verdict structured and judged, plus the run directory it left."""

    status: str
    reason: str
    out: str
    target: str
    mode: str
    forward_type: int
    report: ModuleBasicReport
    tensors: int
    warnings: list[str] = Field(default_factory=list)


class ImportResult(BaseModel):
    out: str
    execution: int
    tensors: int
    precision: str
    outputs: list[str]
    warnings: list[str]
