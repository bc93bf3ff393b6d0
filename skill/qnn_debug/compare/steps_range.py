"""Next steps for the range findings: a model that is not fp16-safe (rescale around a scale-invariant op, shift a
Softmax input, average instead of sum, keep the region off the NPU) and a device encoding that clips the data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..next_step import Arg, NextStep, step
from .steps import (
    EXPORT_DIR,
    FIXED_BASELINE,
    FIXED_MODEL,
    INPUT_RANGE,
    NEW_TARGET,
    THIS_RESULT,
    WRONG_NUMBERS,
    baseline_dir,
    input_args,
)

if TYPE_CHECKING:
    from .schema import CompareResult


def fp16_range_steps(r: CompareResult, ev: dict[str, Any]) -> list[NextStep]:
    """Remedies for a model that is not fp16-safe, each with why, most targeted first; each is checked by
    diagnosing the edited model, and the baseline of the edited model lists what is still out of range."""
    op, tensor, k = ev.get("op"), ev.get("tensor"), ev.get("rescale_exponent")
    source, construct = ev.get("rescale_input"), ev.get("scale_invariant")
    ref_max = float(ev.get("reference_max_abs") or 0.0)
    # sized on this sample only: what the user applies must hold over their input range, which only `fix` (given
    # --input-range) bounds; so the number is said as a lower bound and the exponent left to be sized there
    scale = "2^-K"
    sample_k = f"K at least {k}: 2^-{k} is what this sample alone needs" if k else "K sized on your largest input"
    where = f"`{source}` (the input of {op})" if source else f"the input of {op}"
    squaring = bool(ev.get("squaring"))
    shrink = "squares shrink with the square of the factor, so " if squaring else ""
    top = float(ev.get("region_max_abs") or ref_max)
    top_tensor = ev.get("region_max_tensor") or tensor
    after = top / (4.0 if squaring else 2.0) ** int(k or 1)
    largest = (f"`{top_tensor}`, the largest value up to the normalisation, drops from {top:.3g}"
               if top_tensor != tensor else f"`{tensor}` drops from {ref_max:.3g}")
    check: list[Arg] = ["diagnose", FIXED_MODEL, "--target", "htp-sim", *input_args(r)]
    remedies = []
    if construct:
        why = {"L2-norm": "x / ||x|| is unchanged when x is scaled",
               "RMSNorm": "x / rms(x) is unchanged when x is scaled (scale eps by the square of the factor)",
               "LayerNorm": "(x - mean) / std is unchanged when x is scaled (scale eps by the square of the factor)",
               }[str(construct)]
        remedies.append(f"Or rescale by hand by a power of two around the scale-invariant {construct}: "
                        f"{_rescale_place(ev, scale)} ({sample_k}; at 2^-{k or 'k'} {shrink}{largest} to about "
                        f"{after:.3g}, {_headroom(after)} inside fp16's 65504 for this sample only; other inputs of "
                        f"your range reach more, so size K over the declared range, as `fix --input-range` does), "
                        f"then diagnose the edited model; why: {why}, and a power of two is exact in fp16, so nothing "
                        f"else changes.")
    elif ev.get("shift_invariant"):
        remedies.append(f"Shift, do not rescale: `{tensor}` feeds a Softmax, which is shift-invariant "
                        f"(softmax(x - c) equals softmax(x)) but not scale-invariant; subtract the row maximum before "
                        f"{op}, or write a finite mask value that keeps `{tensor}` inside ±65504 (e.g. -1e4 instead of "
                        f"{ref_max:.3g}), then diagnose the edited model; why: the Softmax only sees differences "
                        f"between logits, so a shift changes nothing it computes.")
    else:
        remedies.append(f"Rescale by a power of two: multiply {where} by {scale} and undo it after the value is back "
                        f"in range ({sample_k}, where `{tensor}` reaches {ref_max:.3g}; size K on the largest input "
                        f"of your range, not this sample; fp16 holds 65504, HTP saturates at 131008), then diagnose "
                        f"the edited model; why: a power of two is exact in fp16, so only the range changes.")
    if ev.get("reduction", True):  # only a sum over many values has a mean to move to
        what = "a sum of N squares" if squaring else "a sum of N terms"
        remedies.append(f"Or move the reduction earlier: average instead of summing (ReduceMean, or divide by the "
                        f"count before {op}) so partial results stay in range, then diagnose the edited model; why: "
                        f"{what} grows N times faster than its mean, and the mean is what the normalisation needs.")
    remedies.append(f"Or keep this region off the NPU (run {op} and its normalisation on CPU, split the graph there), "
                    "then diagnose the edited model; why: MNN's precision=High does not help — on HTP the QNN graph is "
                    "fp16 either way (graph precision FLOAT16; the offline path sets fp16_relaxed_precision), so only "
                    "another backend holds the value.")
    steps = [step("diagnose", check, why) for why in remedies]
    if construct:  # first: the only advice sized over the whole input range, not this sample
        steps.insert(0, step("fix_and_prove", ["fix", THIS_RESULT, "--input-range", INPUT_RANGE],
                             f"Let the tool write the rescale and prove it: it sizes the power of two by the interval "
                             f"bound over the declared input range (every input in it, not only this sample, which "
                             f"alone needs 2^-{k or 'k'}), writes new .fp16-rescaled.onnx and .mnn files beside "
                             f"yours and checks fp32 equivalence, the range on the sample and the range's corner, "
                             f"the simulator run and the .mnn on MNN CPU."))
    steps.append(step("baseline", ["baseline", FIXED_MODEL, *input_args(r), "--out", FIXED_BASELINE],
                      "After the change, check the range before the device: the baseline of the edited model lists "
                      "the tensors that are still not fp16-safe (baseline.json `ranges`)."))
    return steps


HEADROOM_WORDS = "4"  # overflow.HEADROOM, in words


def _headroom(after: float) -> str:
    """How far inside 65504 the rescaled largest value lands: the measured factor (a power of two rounds the
    design headroom of 4 up, so it is 4 to 16), never the design figure passed off as the result."""
    if after <= 0:
        return f"at least a factor {HEADROOM_WORDS}"
    return f"a factor {65504.0 / after:.3g}"
_WEIGHTED = {"Conv": "W and B", "ConvTranspose": "W and B", "Gemm": "B and C (or alpha and C)",
             "MatMul": "its weight (and the bias Add right after it, if any)"}


def _rescale_place(ev: dict[str, Any], scale: str) -> str:
    """Where the factor goes so that only the normalisation sees it: folded into the producing op when every reader
    of the value is inside the normalisation, else one Mul feeding exactly the readers inside it."""
    source, op = ev.get("rescale_input"), ev.get("op")
    inside, outside = list(ev.get("rescale_uses_inside") or []), list(ev.get("rescale_uses_outside") or [])
    producer, ptype = ev.get("rescale_producer"), ev.get("rescale_producer_type")
    if source is None:
        return f"multiply the input of {op} by {scale}, and every other use of it inside the normalisation"
    readers = ", ".join(inside) if inside else str(op)
    only = f" — scaling only {op}'s input would change the result"
    if not outside and ptype in _WEIGHTED:
        return (f"fold {scale} into {producer}'s weights ({ptype}: multiply {_WEIGHTED[str(ptype)]} by {scale}), so "
                f"that every reader of `{source}` ({readers}, all inside the normalisation) sees the scaled value{only}")
    if not outside and producer is None:
        return (f"scale the model input `{source}` by {scale} (in preprocessing, or one Mul by {scale} right after "
                f"the input feeding all its readers: {readers}){only}")
    rest = f"; {', '.join(outside[:4])} keep reading the unscaled `{source}`" if outside else ""
    return (f"insert one Mul(`{source}`, {scale}) and feed it to every reader of `{source}` inside the normalisation "
            f"({readers}){rest}{only}")


def encoding_range_steps(r: CompareResult, ev: dict[str, Any]) -> list[NextStep]:
    """A device encoding that clips the data: widen it where it is set, then check again."""
    tensor = ev.get("tensor")
    lo, hi = ev.get("device_range") or [None, None]
    rlo, rhi = ev.get("reference_range") or [None, None]
    model = ev.get("model_range")
    calibrated = (f"; the model's own QDQ encoding spans [{model[0]:.4g}, {model[1]:.4g}], so the device run used "
                  f"another encoding than the model's (a re-export, an inherited scale, or calibration on other data)"
                  if isinstance(model, list) and None not in model else "")
    return [
        step("compare", ["compare", baseline_dir(r), NEW_TARGET],
             f"Widen the encoding of `{tensor}` to cover its data — the device range is [{lo:.4g}, {hi:.4g}] while "
             f"the reference spans [{rlo:.4g}, {rhi:.4g}]; re-calibrate with representative inputs or set its scale "
             f"from the real range{calibrated} — then dump again and compare: values beyond the range are clipped "
             f"to the rail, which no later op can undo, and the clipping is gone when no tensor shows an "
             f"`encoding_range` finding (background: {WRONG_NUMBERS})."),
        step("check_llm_export", ["llm-check", EXPORT_DIR],
             f"If `{tensor}` is a Mul output (e.g. SwiGLU gate*up in an LLM export), give it its own calibrated "
             f"scale instead of one operand's — a product inherits neither operand's range, so a copied scale "
             f"saturates (llm-check lists the Mul outputs that reuse an operand's encoding); for 16-bit "
             f"activations, also check the encoding is not unsigned for data with negative values."),
    ]
