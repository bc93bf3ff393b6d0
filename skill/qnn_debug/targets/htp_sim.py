"""The ``htp-sim`` target: Qualcomm's HTP simulator (onnxruntime-qnn) with every tensor captured.

What a run guarantees:
- nothing ran on the CPU (``qnn_ep.create_session`` forbids fallback and fails listing the nodes
  QNN rejected); which nodes ran on QNN is in ``run.json.assignment``;
- tensors carry their ONNX names, the producing node and its position in the ONNX execution order,
  so they align with the baseline by name;
- ``run.json.observer_effect_db`` holds, per final output, the SQNR of the mark-all run against an
  unmarked run of the same configuration (marking blocks fusions; a low value means the per-layer
  numbers describe a different graph than the one a user ships);
- ``--precision quantized`` (QDQ models): the simulator exposes QuantizeLinear outputs, which are
  stored as raw uint8/uint16 plus scale/offset under the *float* tensor's name (``target_name`` is
  the Q output), so they compare directly with the fp32 reference;
- ``--precision fp16``: tensors are exported as float16 views (marked run 1.6-2.1x faster; ``source_dtype`` float16,
  stored as NCHW float32 like every run; views beyond the fp16 range are re-fetched as float32);
  ``--option capture_dtype=float32`` marks the float32 tensors instead, as fp32 runs always do.

The simulator writes to fd 1 and shares one backend per process: the work happens in
:mod:`qnn_debug.workers.htp_worker`, one process per run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadInputError
from ..progress import Progress
from ..runstore import Run, RunRecord, prepare_run_dir
from ..versions import library_versions
from . import DumpRequest
from .base import Capabilities, ProbeSetup, ProbeValues, Target
from .sim_lowering import lower_for_simulator
from .worker_run import run_capture_worker

if TYPE_CHECKING:
    import numpy as np
    import onnx

WORKER = "qnn_debug.workers.htp_worker"
PROBE_WORKER = "qnn_debug.workers.sim_probe_worker"

# Provider options a user may add with --option (the EP silently accepts unknown keys, so we do not).
EXTRA_PROVIDER_OPTIONS = {
    "htp_performance_mode", "vtcm_mb", "htp_graph_finalization_optimization_mode", "enable_htp_fp16_clamp_overflow",
    "profiling_level", "profiling_file_path", "enable_framework_op_trace", "framework_op_trace_dir",
    "dump_json_qnn_graph", "json_qnn_graph_dir",
}
# How marked float tensors leave the simulator (``--option capture_dtype=``); fp16 runs default to float16.
CAPTURE_DTYPES = ("float16", "float32")
# ORT graph optimizers that change QNN numerics (measured); switch them off to localise fusion effects.
KNOWN_OPTIMIZERS = ("ConvBNFusion", "MatMulAddFusion", "ConvAddFusion", "ConvMulFusion", "GemmActivationFusion")


def split_options(options: dict[str, str]) -> tuple[dict[str, str], list[str], str | None]:
    """``--option`` pairs → (extra provider options, disabled ORT optimizers, capture dtype or None);
    unknown keys are refused."""
    extra: dict[str, str] = {}
    disabled: list[str] = []
    capture: str | None = None
    for key, value in options.items():
        if key == "disabled_optimizers":
            disabled = [v.strip() for v in value.split(",") if v.strip()]
        elif key == "capture_dtype":
            if value not in CAPTURE_DTYPES:
                raise BadInputError(f"capture_dtype must be one of {', '.join(CAPTURE_DTYPES)}, not {value!r}",
                                    hint="float16 (fp16 default, faster) or float32 (marks the float32 tensors)")
            capture = value
        elif key in EXTRA_PROVIDER_OPTIONS:
            extra[key] = value
        else:
            raise BadInputError(
                f"htp-sim does not take the option {key!r}",
                hint="allowed: disabled_optimizers=" + ",".join(KNOWN_OPTIMIZERS[:2]) + ", capture_dtype=float32, "
                + ", ".join(sorted(EXTRA_PROVIDER_OPTIONS)),
            )
    return extra, disabled, capture


class SimOptions(BaseModel):
    """The simulator's ``--option`` keys, typed (read from ``key=value`` pairs by :func:`split_options`)."""

    model_config = ConfigDict(frozen=True)

    provider: dict[str, str] = Field(default_factory=dict)  # extra QNN EP provider options (EXTRA_PROVIDER_OPTIONS)
    disabled_optimizers: list[str] = Field(default_factory=list)  # ORT graph optimizers switched off
    capture_dtype: str | None = None  # how marked float tensors leave the simulator


class HtpSimTarget(Target):
    """Qualcomm's HTP simulator: every tensor marked in one run, or many unmarked cuts in one process."""

    name: ClassVar[str] = "htp-sim"
    description: ClassVar[str] = "Qualcomm's HTP simulator from onnxruntime-qnn (x86_64 libQnnHtp.so)"
    capabilities: ClassVar[Capabilities] = Capabilities(observer_effect=True, fusion_switches=True, one_session=True)
    options_model: ClassVar[type[BaseModel]] = SimOptions

    def options(self, options: dict[str, str]) -> SimOptions:
        extra, disabled, capture = split_options(options)
        return SimOptions(provider=extra, disabled_optimizers=disabled, capture_dtype=capture)

    def dump(self, request: DumpRequest, progress: Progress) -> Run:
        return run(request, progress)

    def session_options(self, setup: ProbeSetup) -> dict[str, Any]:
        from . import qnn_ep

        opts = self.options(setup.options)
        return {"options": qnn_ep.provider_options(setup.soc_model, setup.htp_arch, opts.provider),
                "disabled_optimizers": opts.disabled_optimizers}

    def run_session(self, job: dict[str, Any], *, log: Path, what: str, timeout: float, progress: Progress) -> Any:
        from ..workers import run_worker

        return run_worker(PROBE_WORKER, job, log_path=log, timeout=timeout, progress=progress, what=what)

    def prober(self, setup: ProbeSetup) -> SimProber:
        return SimProber(self, setup)

    def fusion_option(self, fusions: list[str]) -> list[str]:
        return ["--option", f"disabled_optimizers={','.join(fusions)}"]

    def known_fusions(self) -> tuple[str, ...]:
        return KNOWN_OPTIMIZERS


class SimProber:
    """One cut model per simulator worker (``run_session`` runs a whole search in one process instead)."""

    def __init__(self, target: HtpSimTarget, setup: ProbeSetup):
        self.target, self.setup, self.count = target, setup, 0

    def probe(self, model: onnx.ModelProto, outputs: list[str], inputs: dict[str, np.ndarray], *,
              reference: onnx.ModelProto | None = None, work: Path | None = None) -> ProbeValues:
        import numpy as np

        from ..inputs import save_npz
        from .onnx_capture import serialize

        where = work or self.setup.work / f"probe{self.count:04d}"
        self.count += 1
        where.mkdir(parents=True, exist_ok=True)
        (where / "model.onnx").write_bytes(serialize(model))
        wanted = {v.name for v in model.graph.input}
        save_npz(where / "inputs.npz", {k: v for k, v in inputs.items() if k in wanted})
        answer = self.target.run_session({"job": "values", "model": str(where / "model.onnx"),
                                          "inputs_npz": str(where / "inputs.npz"), "outputs": list(outputs),
                                          "values": str(where / "values.npz"), **self.target.session_options(self.setup)},
                                         log=where / "htp_probe_worker.log", what="HTP simulator probe",
                                         timeout=self.setup.timeout, progress=self.setup.progress)
        with np.load(answer["values"], allow_pickle=False) as z:
            return ProbeValues(target={n: z[f"v{i}"] for i, n in enumerate(outputs)})


def capture_dtype(precision: str, requested: str | None) -> str:
    """How marked float tensors are exported: float16 views for fp16 runs unless ``requested`` says otherwise."""
    if requested == "float16" and precision != "fp16":
        raise BadInputError(f"capture_dtype=float16 would round a {precision} run's tensors to fp16",
                            hint="float16 views are for --precision fp16 only")
    return requested or ("float16" if precision == "fp16" else "float32")


def run(request: DumpRequest, progress: Progress) -> Run:
    """Capture every tensor of ``request.model`` on the HTP simulator into ``request.out``."""
    from ..inputs import fix_input_shapes, prepare_inputs
    from ..onnx_graph import ensure_node_names, graph_inputs, load_onnx
    from . import qnn_ep
    from .onnx_capture import is_qdq_model, model_info, serialize

    model_path = Path(request.model)
    if model_path.suffix.lower() == ".mnn":
        raise BadInputError("the htp-sim target runs ONNX models; this is an .mnn file",
                            hint="dump .mnn models with --target host or --target device")
    soc, arch = request.soc_model, request.htp_arch
    _check_precision(request.precision, soc)
    extra, disabled, requested_capture = split_options(request.options)
    capture = capture_dtype(request.precision, requested_capture)
    options = qnn_ep.provider_options(soc, arch, extra)
    with progress.stage("htp-sim: prepare", total=None, message="htp-sim: loading the model and inputs"):
        model = ensure_node_names(load_onnx(model_path))
        qdq = is_qdq_model(model)
        if request.precision == "quantized" and not qdq:
            raise BadInputError(
                f"{model_path.name} has no QuantizeLinear/DequantizeLinear nodes, so it cannot run quantized",
                hint="quantize it to QDQ first (onnxruntime.quantization with get_qnn_qdq_config), or use --precision fp16",
            )
        if request.precision != "quantized" and qdq:
            raise BadInputError(f"{model_path.name} is a QDQ-quantized model; HTP runs it in integer arithmetic",
                                hint="use --precision quantized")
        prepared = prepare_inputs(graph_inputs(model), inputs=request.inputs, shapes=request.shapes, seed=request.seed,
                                  model=model)
        fixed = fix_input_shapes(model, prepared.shapes)
        lowered = lower_for_simulator(fixed)
    out = prepare_run_dir(request.out, force=request.force).resolve()
    record = RunRecord(
        role="target", target="htp-sim", precision=request.precision, model=model_info(model_path, model),
        inputs=prepared.info, soc_model=soc or None, htp_arch=int(options["htp_arch"]) if "htp_arch" in options else None,
        versions=library_versions(), outputs=[o.name for o in model.graph.output], warnings=[*prepared.warnings, *lowered],
    )
    worker_request = {"force": True, "record": record.model_dump(mode="json"), "options": options,
                      "precision": request.precision, "disabled_optimizers": disabled, "capture_dtype": capture}
    return run_capture_worker(WORKER, worker_request, out, prepared.arrays, log_name="htp_worker.log",
                              what="HTP simulator run", timeout=request.timeout, progress=progress,
                              files={"model": serialize(fixed)})


def _check_precision(precision: str, soc: int) -> None:
    """``soc_model`` alone decides fp16 vs fp32 numerics on the simulator; refuse contradictory requests."""
    from ..mnn.soc import DEFAULT_SOC, FP32_SOCS, soc_by_id

    if precision == "fp32" and soc not in FP32_SOCS:
        raise BadInputError(f"soc_model {soc} runs fp16 on the simulator, not fp32",
                            hint="use --soc 30 --arch 68 for the fp32 translation check (single ops only)")
    if precision == "fp16" and soc in FP32_SOCS:
        raise BadInputError(f"soc_model {soc} gives fp32 numerics on the simulator, not fp16",
                            hint=f"use a real SoC id such as --soc {DEFAULT_SOC} ({soc_by_id(DEFAULT_SOC).label}) for fp16")


TARGET = HtpSimTarget()
