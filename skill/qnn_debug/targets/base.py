"""What a target is: a class with typed options, declared capabilities, ``dump``, ``probe`` and its own hints.

Code outside a target never asks a target's name; it asks the target (see ``Capabilities``). ``bisect``,
``localise-blocks`` and ``diagnose`` run a target only through :meth:`Target.dump`, :meth:`Target.prober`
(one cut model at a time) and, for targets that declare ``one_session``, :meth:`Target.run_session` (many
probes judged inside one process of the target's own, e.g. one simulator backend).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import BadInputError
from ..progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from ..runstore import Run
    from . import DumpRequest


class Capabilities(BaseModel):
    """What a target can do; the engine decides by these, never by the target's name."""

    model_config = ConfigDict(frozen=True)

    dumps_every_tensor: bool = True  # dump() captures every intermediate tensor (diagnose, compare)
    runs_cut_model: bool = True  # prober() runs a truncated model unmarked (bisect, localise-blocks)
    observer_effect: bool = False  # marking tensors can change the graph: diagnose checks the dump and falls back
    fusion_switches: bool = False  # an option switches graph fusions off (see ``Target.fusion_option``)
    own_reference: bool = False  # probes bring the same device's CPU fp32 reference and fp16 floor (no baseline)
    one_session: bool = False  # many probes judged in one process of the target's (run_session)
    takes_settings: bool = False  # the typed device/host settings (serial, mnn_dir, ...) apply to it
    module_basic: bool = False  # runs a model with MNN's ModuleBasic as MNN's own test does (``qnn-debug run``)
    over_adb: bool = False  # a phone over adb: ``serial`` and the ``adb`` executable apply
    runs_mnn: bool = False  # dump() runs an .mnn model (MNN's own QNN backend): ``diagnose --mnn-model`` applies


class NoOptions(BaseModel):
    """A target without ``--option`` keys."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class ProbeSetup:
    """What every probe of one search shares."""

    work: Path
    soc_model: int
    htp_arch: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    opencl: bool = False  # targets with their own reference: add OpenCL fp16 as a third opinion
    timeout: float = 1800.0
    progress: Progress = NULL_PROGRESS


@dataclass
class ProbeValues:
    """The values of one probe's outputs; ``reference``/``floor`` only from targets with ``own_reference``."""

    target: dict[str, np.ndarray]
    reference: dict[str, np.ndarray] | None = None
    floor: dict[str, np.ndarray] | None = None
    opinions: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # e.g. "opencl_fp16" → values


class Prober(Protocol):
    def probe(self, model: onnx.ModelProto, outputs: list[str], inputs: dict[str, np.ndarray], *,
              reference: onnx.ModelProto | None = None, work: Path | None = None) -> ProbeValues:
        """Run ``model`` (already cut so that ``outputs`` are its graph outputs) on ``inputs``; ``reference``
        is the reference model cut the same way (targets with ``own_reference`` run it as their reference)."""
        ...


class Target:
    """One place a model runs. Subclasses set the class attributes and implement what their capabilities say."""

    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    options_model: ClassVar[type[BaseModel]] = NoOptions

    def options(self, options: dict[str, str]) -> BaseModel:
        """``--option key=value`` pairs checked against the target's typed options model: the keys its probes and
        sessions read (a dump may read more: ``device``/``host`` check those in :mod:`qnn_debug.mnn.capture`)."""
        try:
            return self.options_model.model_validate(options)
        except ValidationError as e:
            first = e.errors()[0]
            key = ".".join(str(p) for p in first.get("loc", ()))
            raise BadInputError(f"{self.name} does not take the option {key}={options.get(key, '')!r}: "
                                f"{first.get('msg', 'invalid value')}",
                                hint="allowed: " + (", ".join(self.options_model.model_fields) or "none")) from None

    def dump(self, request: DumpRequest, progress: Progress) -> Run:
        raise BadInputError(f"the {self.name} target cannot dump every tensor",
                            hint="use bisect, which runs cut models only")

    def prober(self, setup: ProbeSetup) -> Prober:
        raise BadInputError(f"the {self.name} target cannot run a cut model", hint="use diagnose (a full dump)")

    def run_session(self, job: dict[str, Any], *, log: Path, what: str, timeout: float, progress: Progress) -> Any:
        """Targets with ``one_session``: run a probe job (``bisect``: the whole search; ``blocks``: every block
        side by side) in one process of the target's and return its answer."""
        raise NotImplementedError(f"{self.name} declares no one_session")

    def session_options(self, setup: ProbeSetup) -> dict[str, Any]:
        """What a ``run_session`` job carries about the target (provider options, switched-off fusions)."""
        return {}

    def fusion_option(self, fusions: list[str]) -> list[str]:
        """Targets with ``fusion_switches``: the ``--option`` argv that switches ``fusions`` off."""
        return []

    def known_fusions(self) -> tuple[str, ...]:
        """Targets with ``fusion_switches``: the fusions known to change its numerics."""
        return ()
