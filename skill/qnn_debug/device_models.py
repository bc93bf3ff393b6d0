"""What the device operations return (pydantic only; :mod:`qnn_debug.device_ops` re-exports them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .mnn.models import ModuleBasicReport


class DevicesResult(BaseModel):
    devices: list[dict[str, Any]]
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
