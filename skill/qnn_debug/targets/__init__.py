"""Target registry: where a model runs. A new target is one new module (a :class:`~.base.Target` subclass
whose instance is the module's ``TARGET``) plus one ``register_target`` line here, or ``register(instance)``.

A target turns a :class:`DumpRequest` into a finished run directory (see ``runstore``) and runs cut models
for ``bisect`` / ``localise-blocks``. Targets are looked up by name (``htp-sim``, ``device``, ``host``);
modules are imported lazily so the CLI and the MCP server start without loading onnxruntime or MNN.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from ..errors import BadInputError
from ..mnn.soc import DEFAULT_SOC
from ..progress import Progress
from .base import Capabilities, Target

__all__ = [
    "TARGETS",
    "Capabilities",
    "DumpRequest",
    "Precision",
    "Target",
    "check_target",
    "default_target",
    "get_target",
    "register",
    "register_target",
    "target",
    "target_names",
]

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


if TYPE_CHECKING:
    from ..runstore import Run

TargetFn = Callable[[DumpRequest, Progress], "Run"]


@dataclass
class TargetSpec:
    name: str
    module: str  # module whose ``TARGET`` is the :class:`~.base.Target` instance (imported when first used)
    description: str
    instance: Target | None = None


# name → spec; the CLI/MCP choices and ``check_target`` read this.
TARGETS: dict[str, TargetSpec] = {}


def register_target(name: str, module: str, description: str) -> None:
    """Register a target module lazily (its ``TARGET`` is imported when first used)."""
    TARGETS[name] = TargetSpec(name, module, description)


def register(target: Target) -> Target:
    """Register a target instance (a plugin or a test double); returns it."""
    TARGETS[target.name] = TargetSpec(target.name, type(target).__module__, target.description, target)
    return target


def target_names() -> tuple[str, ...]:
    return tuple(TARGETS)


def default_target() -> str:
    return DEFAULT_TARGET


def check_target(name: str) -> TargetSpec:
    """The registered target called ``name``, or a typed error listing the ones there are."""
    spec = TARGETS.get(name)
    if spec is None:
        raise BadInputError(f"unknown target {name!r}", hint=f"choose one of: {', '.join(sorted(TARGETS))}")
    return spec


def target(name: str) -> Target:
    """The :class:`~.base.Target` called ``name`` (imports its module on first use)."""
    spec = check_target(name)
    if spec.instance is None:
        spec.instance = importlib.import_module(spec.module).TARGET
    assert spec.instance is not None
    return spec.instance


def get_target(name: str) -> TargetFn:
    return target(name).dump


DEFAULT_TARGET = "htp-sim"
register_target("htp-sim", "qnn_debug.targets.htp_sim", "Qualcomm's HTP simulator from onnxruntime-qnn (x86_64 libQnnHtp.so)")
register_target("device", "qnn_debug.targets.device", "MNN's QNN backend on an Android phone over adb")
register_target("host", "qnn_debug.targets.host", "MNN's QNN backend from a local MNN build dir (e.g. x86_64 + HTP simulator libs)")
