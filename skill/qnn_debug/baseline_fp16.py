"""The gate's limit when the model itself computes in fp16.

For an fp32 model the MNN-CPU gate's limit is a tenth of the fp16 floor (two fp32 implementations must agree
far better than fp16 storage perturbs the model). An fp16 model breaks that premise: ONNX Runtime computes
its float16 tensors in fp16 while MNN's CPU computes the same graph in fp32 (measured on a TorchScript fp16
Qwen3: MNN matches the graph lifted to fp32 to 1e-6, and differs from ORT by exactly the lift's 6.2e-4), so
the two differ by the model's own fp16 rounding, which the floor does not see (its tensors are fp16 already).

That rounding is measured, not guessed: the graph lifted to fp32 (:func:`qnn_debug.onnx_fp16.lift_to_fp32`)
runs on ORT CPU, and its relative difference from the fp16 reference at each tensor is what fp16's unit
roundoff (2^-11) grew to through this model's depth and size. The fp16 limit of a tensor is twice that (each
implementation may sit on either side of the exact value), at least one unit roundoff (a value stored in
fp16 is not known closer), at most the fp32 rule's ceiling of 1e-2 (a gate that lets larger disagreements
through vouches for nothing). Tensors the fp16 arithmetic does not reach keep the fp32 rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .compare.metrics import error_stats, max_rel_error
from .errors import QnnDebugError

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from .baseline_models import GateOutput
    from .onnx_fp16 import Fp16Signs
    from .runstore import Run

U16 = 2.0 ** -11  # fp16 unit roundoff: half the spacing of float16 values in [1, 2)
FP16_MARGIN = 2.0
GATE_MIN_LIMIT, GATE_MAX_LIMIT, GATE_FLOOR_FRACTION = 1e-4, 1e-2, 0.1
LimitRule = Literal["fp32", "fp16"]


@dataclass
class Fp16Arithmetic:
    """How far the model's own fp16 arithmetic moves each float tensor (ORT fp16 vs the fp32 lift), by name.

    ``own`` holds only the tensors the fp16 arithmetic reaches (stored as float16, or moved by it);
    ``lift_outputs`` the lift's final outputs, to say how close MNN is to the fp32 computation."""

    signs: Fp16Signs
    own: dict[str, float] = field(default_factory=dict)
    lift_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None  # why the lift could not be measured (the fp32 rule then applies everywhere)


def rel(test: np.ndarray, ref: np.ndarray) -> float | None:
    """max|test-ref| / max|ref| in float64 (None when either side is not finite): the gate's one measure."""
    return max_rel_error(error_stats(test, ref, wide=True))[0]


def measure_fp16(model: onnx.ModelProto, reference: Run, feeds: dict[str, np.ndarray]) -> Fp16Arithmetic | None:
    """The model's own fp16 error per tensor, or None for a model with no sign of fp16 compute.

    ``model`` is the shape-fixed graph the reference ran; ``feeds`` its inputs."""
    from .onnx_fp16 import fp16_signs, lift_feeds, lift_to_fp32
    from .targets.onnx_capture import run_on_cpu

    signs = fp16_signs(model)
    if signs is None:
        return None
    result = Fp16Arithmetic(signs=signs)
    names = [t.name for t in reference.tensors if t.kind != "input"]
    try:
        values = run_on_cpu(lift_to_fp32(model), lift_feeds(feeds), names)
    except QnnDebugError as e:
        result.error = f"{e}"
        return result
    outputs = set(reference.record.outputs)
    for name in names:
        ref = reference.array(name)
        got = values.get(name)
        if got is None or ref.dtype.kind != "f" or got.shape != ref.shape:
            continue
        own = rel(got, ref)
        if own is None:
            continue
        if name in outputs:
            result.lift_outputs[name] = got
        if own > 0.0 or ref.dtype.itemsize == 2:
            result.own[name] = own
    return result


def gate_limit(floor_rel: float | None, own_rel: float | None) -> tuple[float, LimitRule]:
    """The limit of one tensor and which rule set it: the fp32 rule (a tenth of the fp16 floor, within
    [1e-4, 1e-2]), or, where the model's own fp16 arithmetic reaches it, twice that arithmetic's error (at
    least one fp16 unit roundoff, at most 1e-2) when that is the larger."""
    fp32 = min(GATE_MAX_LIMIT, max(GATE_MIN_LIMIT, GATE_FLOOR_FRACTION * (floor_rel or 0.0)))
    if own_rel is None:
        return fp32, "fp32"
    fp16 = min(GATE_MAX_LIMIT, max(U16, FP16_MARGIN * own_rel))
    return (fp16, "fp16") if fp16 >= fp32 else (fp32, "fp32")


def limit_words(arith: Fp16Arithmetic | None, outputs: list[GateOutput]) -> str:
    """Which limit applied to the outputs and why, in the report's words."""
    if arith is None:
        return ("fp32 limit: the graph computes in fp32 (no float16 weights, constants, inputs or casts), so MNN and "
                "ONNX Runtime must agree to a tenth of the fp16 floor (within [1e-4, 1e-2])")
    why = f"the graph computes in fp16 ({arith.signs.words()})"
    if arith.error is not None:
        return (f"fp32 limit, although {why}: its fp32 lift could not run on ONNX Runtime ({arith.error}), so the "
                f"model's own fp16 error is unknown; an fp16 model may fail this gate by its own rounding alone")
    parts = []
    for o in outputs:
        own = o.fp16_own_rel_error
        if o.limit_rule == "fp16" and own is not None:
            capped = (" (capped: the model's own fp16 error exceeds what the gate can vouch for)"
                      if FP16_MARGIN * own > GATE_MAX_LIMIT else "")
            mnn = ("" if o.fp32_lift_rel_error is None else
                   f"; MNN CPU is {o.fp32_lift_rel_error:.1e} from that fp32 graph")
            parts.append(f"{o.name!r}: its own fp16 arithmetic moves it by {own:.1e} ({own / U16:.1f} fp16 unit "
                         f"roundoffs) from the same graph in fp32, limit {o.limit:.1e}{capped}{mnn}")
        else:
            parts.append(f"{o.name!r}: limit {o.limit:.1e} (the fp32 rule, the larger here)")
    return (f"fp16 limit: {why}; ONNX Runtime computes it in fp16 and MNN CPU in fp32, so they may differ by "
            f"twice the model's own fp16 error, measured by running the graph lifted to fp32: " + "; ".join(parts))
