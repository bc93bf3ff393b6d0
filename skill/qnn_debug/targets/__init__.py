"""Target registry: where a QNN dump comes from. A new target is one new module that registers itself.

A target turns a :class:`DumpRequest` into a finished run directory (see ``runstore``). Targets are
looked up by name (``htp-sim``, ``device``, ``host``); modules are imported lazily so the CLI and the
MCP server start without loading onnxruntime or MNN.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..errors import BadInputError
from ..mnn.soc import DEFAULT_SOC
from ..progress import Progress
from ..runstore import Run

Precision = Literal["fp16", "fp32", "quantized"]


class DumpRequest(BaseModel):
    """Everything a target needs to produce one all-tensor run of a model."""

    model: Path
    out: Path
    target: str = "htp-sim"  # a name registered below; ``qnn_debug.dump.run_dump`` dispatches on it
    precision: Precision = "fp16"
    soc_model: int = DEFAULT_SOC
    htp_arch: int | None = None
    inputs: Path | None = None  # .npz keyed by input name (e.g. <baseline>/inputs.npz)
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    seed: int = 0
    force: bool = False
    timeout: float = 1800.0
    options: dict[str, str] = Field(default_factory=dict)  # target specific: serial, mnn_build_dir, ...


TargetFn = Callable[[DumpRequest, Progress], Run]


@dataclass(frozen=True)
class TargetSpec:
    name: str
    module: str  # module that defines ``run(request, progress) -> Run``
    description: str


# name → module; each module defines ``run(request: DumpRequest, progress: Progress) -> Run``.
TARGETS: dict[str, TargetSpec] = {}


def register_target(name: str, module: str, description: str) -> None:
    TARGETS[name] = TargetSpec(name, module, description)


def check_target(name: str) -> TargetSpec:
    """The registered target called ``name``, or a typed error listing the ones there are."""
    spec = TARGETS.get(name)
    if spec is None:
        raise BadInputError(f"unknown target {name!r}", hint=f"choose one of: {', '.join(sorted(TARGETS))}")
    return spec


def get_target(name: str) -> TargetFn:
    fn: TargetFn = importlib.import_module(check_target(name).module).run
    return fn


register_target("htp-sim", "qnn_debug.targets.htp_sim", "Qualcomm's HTP simulator from onnxruntime-qnn (x86_64 libQnnHtp.so)")
register_target("device", "qnn_debug.targets.device", "MNN's QNN backend on an Android phone over adb")
register_target("host", "qnn_debug.targets.host", "MNN's QNN backend from a local MNN build dir (e.g. x86_64 + HTP simulator libs)")
