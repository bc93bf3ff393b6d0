"""What to do after a verdict: real ``qnn-debug`` commands (MCP tool in brackets) and the matching playbook.

A verdict without a next step leaves the user stuck exactly when the answer is "precision, no single op"
(PP-OCR rec on the simulator: ~18 dB below the floor, no op to blame). The steps are derived from the
comparison alone — its paths, verdict, op types and observer effect — so the CLI, the MCP tools, the
report and the engine API all show the same ones (``CompareResult.next_steps``, filled by ``compare.engine``).

Why these steps (measured on the HTP simulator): marking every tensor blocks ORT's graph fusions, and
fusions change HTP numerics as a whole-graph effect — PP-OCR rec's output went from 30.8 dB (unmarked)
to 46.3 dB with ``ConvBNFusion`` off, MiniLM's from 37.8 dB to 48.3 dB with ``MatMulAddFusion`` off. So
a precision verdict is followed by a re-dump with the fusion off and by the unmarked outputs, which
every htp-sim run keeps in ``unmarked_outputs.npz``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..mnn.soc import DEFAULT_SOC
from ..runstore import INPUTS_FILE, REFERENCE_DIR
from . import fmt

if TYPE_CHECKING:
    from .schema import CompareResult

WRONG_NUMBERS = "playbooks/wrong-numbers.md"
SHAPE_MUTABLE = "playbooks/shape-mutable.md"
UNMARKED_OUTPUTS = "unmarked_outputs.npz"  # written by every htp-sim run (workers/htp_worker.py)
# Marked vs unmarked outputs closer than this to the output's own error: marking changed what is measured.
OBSERVER_MARGIN_DB = 10.0


def next_steps(r: CompareResult) -> list[str]:
    """The steps for ``r``'s verdict, most useful first; none for a healthy run."""
    kind = r.verdict.kind
    if kind == "precision" and isinstance(r.verdict.evidence.get("fp16_range"), dict):
        return _fp16_range(r, r.verdict.evidence["fp16_range"])
    if kind == "precision":
        return _precision(r)
    if kind == "real_bug":
        return _real_bug(r)
    if kind == "input_not_copied":
        return _input_not_copied(r)
    if kind == "quantization":
        return _quantization(r)
    return []


def _q(path: str | Path) -> str:
    """A path as it can be pasted into a shell."""
    return shlex.quote(str(path))


def _baseline_dir(r: CompareResult) -> Path:
    """The baseline directory when the reference is a baseline's ``reference/`` run, else the reference itself."""
    ref = Path(r.reference)
    return ref.parent if ref.name == REFERENCE_DIR and r.floor is not None else ref


def _inputs_arg(r: CompareResult) -> str:
    ref = Path(r.reference)
    inputs = _baseline_dir(r) / INPUTS_FILE if ref.name == REFERENCE_DIR else Path("INPUTS.npz")
    return f"--inputs {_q(inputs)}"


def _model(r: CompareResult) -> str:
    return _q(r.model) if r.model else "MODEL.onnx"


def _is_htp_sim(r: CompareResult) -> bool:
    """Only htp-sim runs measure the observer effect (they also keep the unmarked outputs)."""
    return r.target_kind == "run" and r.observer_effect_db is not None


def _fusions(r: CompareResult) -> list[str]:
    """ORT fusions that changed HTP numerics in measured models and that this graph offers."""
    types = {t.op_type for t in r.tensors if t.op_type}
    found = []
    if "Conv" in types and "BatchNormalization" in types:
        found.append("ConvBNFusion")
    if "MatMul" in types and "Add" in types:  # transformer graphs
        found.append("MatMulAddFusion")
    return found


def _precision(r: CompareResult) -> list[str]:
    if not _is_htp_sim(r):
        return _precision_mnn(r)
    base, run = _baseline_dir(r), Path(r.target)
    steps = [_observer_step(r, base, run)]
    fusions = _fusions(r)
    for opt in fusions:
        steps.append(_redump_step(r, base, run, [opt], f"ORT's {opt} off"))
    if not fusions:  # neither measured culprit is in this graph: try the other known fusions in one go
        steps.append(_redump_step(r, base, run, _other_fusions(), "the other ORT fusions off"))
    steps.append(f"If none of this changes the error, the loss is HTP's fp16 arithmetic itself (rounding accumulated "
                 f"along the graph, or a LUT op such as Sigmoid or Softmax amplified downstream), not a wrong op: "
                 f"see {WRONG_NUMBERS} (fp16 noise vs bug).")
    return steps


def _other_fusions() -> list[str]:
    from ..targets.htp_sim import KNOWN_OPTIMIZERS

    return [o for o in KNOWN_OPTIMIZERS if o not in ("ConvBNFusion", "MatMulAddFusion")]


def _redump_step(r: CompareResult, base: Path, run: Path, optimizers: list[str], what: str) -> str:
    """Re-dump on the simulator with ``optimizers`` disabled, then compare marked tensors and unmarked outputs."""
    precision = f" --precision {r.precision}" if r.precision in ("fp16", "quantized") else ""
    new = run.with_name(f"{run.name}-no-{'-'.join(optimizers) if len(optimizers) == 1 else 'fusions'}")
    return (f"Re-dump with {what} and compare again (fusions change HTP numerics; marking blocks some of them): "
            f"`qnn-debug dump {_model(r)} --target htp-sim{precision} {_inputs_arg(r)} "
            f"--option disabled_optimizers={','.join(optimizers)} --out {_q(new)}` [dump_qnn] (add the original "
            f"--soc/--arch if not soc {DEFAULT_SOC}), then `qnn-debug compare {_q(base)} {_q(new)}` and "
            f"`qnn-debug compare {_q(base)} {_q(new / UNMARKED_OUTPUTS)}` [compare].")


def _observer_step(r: CompareResult, base: Path, run: Path) -> str:
    """Compare the unmarked outputs (the graph as shipped) with the marked per-layer errors."""
    effect = r.observer_effect_db or {}
    marked = {t.name: t.metrics.get("sqnr_db") for t in r.tensors if t.name in effect}
    pairs = "; ".join(f"{k}: marked output SQNR {fmt.db_unit(marked.get(k))}, marked vs unmarked {fmt.observer(v)}"
                      for k, v in effect.items())
    return (f"Compare the unmarked output error with these marked per-layer errors: "
            f"`qnn-debug compare {_q(base)} {_q(run / UNMARKED_OUTPUTS)}` [compare] measures the outputs of the "
            f"graph as shipped (no tensor marked). Observer effect here ({pairs}): {_observer_reading(marked, effect)}")


def _observer_reading(marked: dict[str, float | None], effect: dict[str, float]) -> str:
    """Whether marking moved the outputs by as much as their error (then the per-layer numbers mislead)."""
    close = [k for k, v in effect.items() if marked.get(k) is not None and v < (marked[k] or 0.0) + OBSERVER_MARGIN_DB]
    if close:
        return (f"marking moved {', '.join(close)} by about as much as the error itself, so the marked per-layer "
                f"errors describe a different graph; trust the unmarked comparison and bisect with the fusions below.")
    return ("marking barely moved the outputs compared with their error, so the marked per-layer errors describe "
            "the graph as shipped.")


def _precision_mnn(r: CompareResult) -> list[str]:
    """MNN targets (device, host, MNN dumps): ORT fusions do not apply; check fp16 itself.

    No step suggests MNN ``precision=High`` as an fp32 check: on HTP the QNN graph is fp16 either way (graph
    precision FLOAT16 in MNN's QNN backend, ``fp16_relaxed_precision`` in the offline path)."""
    return [
        f"Get a device-side fp16 floor: run the .mnn on the phone's CPU in fp16, `qnn-debug run MODEL.mnn --target "
        f"device --forward cpu --precision low --baseline {_q(_baseline_dir(r))}` [run_on_device]; an error of the "
        f"same size there is fp16, not a wrong op (precision high is no fp32 check on HTP: its graph precision "
        f"stays FLOAT16).",
        f"See how the same ONNX model behaves on the simulator, where fusion effects can be toggled: "
        f"`qnn-debug diagnose {_model(r)} --target htp-sim` [diagnose].",
        f"Background: {WRONG_NUMBERS} (fp16 noise vs bug).",
    ]


def _fp16_range(r: CompareResult, ev: dict[str, Any]) -> list[str]:
    """Remedies for a model that is not fp16-safe, each with why, most targeted first."""
    op, tensor, k = ev.get("op"), ev.get("tensor"), ev.get("rescale_exponent")
    source, construct = ev.get("rescale_input"), ev.get("scale_invariant")
    ref_max = float(ev.get("reference_max_abs") or 0.0)
    scale = f"2^-{k}" if k else "2^-k"
    where = f"`{source}` (the input of {op})" if source else f"the input of {op}"
    squaring = bool(ev.get("squaring"))
    shrink = "squares shrink with the square of the factor, so " if squaring else ""
    after = ref_max / (4.0 if squaring else 2.0) ** int(k or 1)
    steps = []
    if construct:
        why = {"L2-norm": "x / ||x|| is unchanged when x is scaled",
               "RMSNorm": "x / rms(x) is unchanged when x is scaled (scale eps by the square of the factor)",
               "LayerNorm": "(x - mean) / std is unchanged when x is scaled (scale eps by the square of the factor)",
               "Softmax input": "softmax(x - max(x)) equals softmax(x), and the shifted logits stay small"}[str(construct)]
        steps.append(f"Rescale by a power of two around the scale-invariant {construct}: multiply {where} by {scale} "
                     f"before it ({shrink}`{tensor}` drops from {ref_max:.3g} to about {after:.3g}, "
                     f"inside fp16's 65504). Why: {why}, and a power of two is exact in fp16, so nothing else changes.")
    else:
        steps.append(f"Rescale by a power of two: multiply {where} by {scale} and undo it after the value is back "
                     f"in range (`{tensor}` reaches {ref_max:.3g}; fp16 holds 65504, HTP saturates at 131008). Why: "
                     f"a power of two is exact in fp16, so only the range changes.")
    steps.append(f"Or move the reduction earlier: average instead of summing (ReduceMean, or divide by the count "
                 f"before {op}), so partial results stay in range. Why: a sum of N squares grows N times faster "
                 f"than its mean, and the mean is what the normalisation needs.")
    steps.append(f"Or keep this region off the NPU (run {op} and its normalisation on CPU, split the graph there). "
                 "Why: MNN's precision=High does not help — on HTP the QNN graph is fp16 either way (graph precision "
                 "FLOAT16; the offline path sets fp16_relaxed_precision), so only another backend holds the value.")
    fixed = f"`qnn-debug baseline FIXED_MODEL.onnx {_inputs_arg(r)} --out FIXED_BASELINE` [baseline]"
    steps.append(f"After the change, check the range before the device: {fixed} lists the tensors that are still "
                 f"not fp16-safe (baseline.json `ranges`), then `qnn-debug diagnose FIXED_MODEL.onnx --target htp-sim "
                 f"{_inputs_arg(r)}` [diagnose].")
    return steps


def _real_bug(r: CompareResult) -> list[str]:
    ff = r.first_failing
    steps = []
    if ff is not None and ff.op_type:
        steps.append(f"Check {ff.op_type}'s QNN/HTP constraints and known MNN traps, and try it alone on the simulator: "
                     f"`qnn-debug op {shlex.quote(ff.op_type)} --probe` [lookup_op_constraints].")
    pattern = f" for the `{r.verdict.pattern}` pattern" if r.verdict.pattern != "none" else ""
    steps.append(f"Follow {WRONG_NUMBERS}{pattern}: the classic causes of a wrong op in MNN's QNN backend and "
                 f"how to confirm each.")
    if "local_error" in r.verdict.evidence:
        steps.append(f"Let compare re-run the op on CPU to confirm: `qnn-debug compare {_q(_baseline_dir(r))} "
                     f"{_q(r.target)} --model {_model(r)}` [compare].")
    return steps


def _input_not_copied(r: CompareResult) -> list[str]:
    """Zeros: the input was not copied. A copy that differs otherwise may just be a baseline built from other
    data, which is the cheaper check, so it comes first."""
    steps = []
    mismatch = r.verdict.evidence.get("input_mismatch")
    if isinstance(mismatch, dict):
        mnn = " (with the same --mnn-model)" if r.target_kind == "mnn-dump" else ""
        steps.append(f"Rebuild the baseline from the inputs the device used (the MNN test dir, or an .npz of "
                     f"{mismatch.get('input')!r} as it was fed): `qnn-debug baseline {_model(r)} --inputs TESTDIR "
                     f"--out NEW_BASELINE` [baseline], then `qnn-debug compare NEW_BASELINE {_q(r.target)}`{mnn} "
                     f"[compare]; if the input then matches, the first comparison only used other data.")
    toggle = ("set shapeMutable to false in the MNN test dir the run used: `qnn-debug toggle-shape-mutable TESTDIR "
              "--value false` [toggle_shapeMutable], run it again (`qnn-debug run MODEL.mnn --testdir TESTDIR` "
              "[run_on_device]) and compare again.")
    steps.append(f"Otherwise {toggle}" if steps else toggle[0].upper() + toggle[1:])
    steps.append(f"Why online QNN needs it, and the other shape traps: {SHAPE_MUTABLE}.")
    return steps


def _encoding_range(r: CompareResult, ev: dict[str, Any]) -> list[str]:
    """A device encoding that clips the data: widen it where it is set, then check again."""
    tensor = ev.get("tensor")
    lo, hi = ev.get("device_range") or [None, None]
    rlo, rhi = ev.get("reference_range") or [None, None]
    model = ev.get("model_range")
    calibrated = (f" The model's own QDQ encoding spans [{model[0]:.4g}, {model[1]:.4g}], so the device run used "
                  f"another encoding than the model's (a re-export, an inherited scale, or calibration on other data)."
                  if isinstance(model, list) and None not in model else "")
    return [
        f"Widen the encoding of `{tensor}` to cover its data: the device range is [{lo:.4g}, {hi:.4g}] while the "
        f"reference spans [{rlo:.4g}, {rhi:.4g}]; re-calibrate with representative inputs or set its scale from "
        f"the real range.{calibrated} Why: values beyond the range are clipped to the rail, which no later op can undo.",
        f"If `{tensor}` is a Mul output (e.g. SwiGLU gate*up in an LLM export), give it its own calibrated scale "
        f"instead of one operand's: a product inherits neither operand's range, so a copied scale saturates. For "
        f"16-bit activations, also check the encoding is not unsigned for data with negative values.",
        f"Then dump again and compare: `qnn-debug compare {_q(_baseline_dir(r))} NEW_TARGET` [compare]; the "
        f"clipping is gone when no tensor shows an `encoding_range` finding. Background: {WRONG_NUMBERS}.",
    ]


def _quantization(r: CompareResult) -> list[str]:
    ev = r.verdict.evidence.get("encoding_range")
    if isinstance(ev, dict):
        return _encoding_range(r, ev)
    worst = r.verdict.evidence.get("worst_excess", {}).get("tensor")
    row = next((t for t in r.tensors if t.name == worst), None)
    where = f"{worst!r}" if worst else "the worst tensor"
    span = ""
    if row is not None and row.metrics.get("max_abs_ref") is not None:
        span = f" (its reference values reach ±{row.metrics['max_abs_ref']:.3g})"
    return [
        f"Check the encodings and calibration of {where}: its scale/offset (`tensors[].quant` in "
        f"{_q(Path(r.target) / 'run.json')}) against its real value range{span}; a range calibrated much wider "
        f"than the data wastes steps, a narrower one clips.",
        "If the encodings match the data but the loss is too large, re-calibrate with representative inputs or "
        "16-bit activations (onnxruntime.quantization get_qnn_qdq_config, activation_type=QUInt16) and run "
        "`qnn-debug diagnose QDQ_MODEL.onnx --precision quantized` [diagnose] again.",
        f"To see what quantization costs against fp32, build a baseline of the float model on the same inputs "
        f"(`qnn-debug baseline FLOAT_MODEL.onnx {_inputs_arg(r)}` [baseline]) and compare this run with it; "
        f"background: {WRONG_NUMBERS}.",
    ]
