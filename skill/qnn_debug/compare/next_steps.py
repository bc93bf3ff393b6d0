"""What to do after a verdict: structured steps (MCP tool, runnable ``qnn-debug`` line, why) and the playbooks.

A verdict without a next step leaves the user stuck exactly when the answer is "precision, no single op"
(PP-OCR rec on the simulator: ~18 dB below the floor, no op to blame). The steps are derived from the
comparison alone — its paths, verdict, op types and observer effect — so the CLI, the MCP tools, the
report and the engine API all show the same ones (``CompareResult.next_steps``). Every step carries a
command: advice that has none of its own (edit the model, re-calibrate) rides on the command that
carries it out or checks it, and a value only the user knows is a quoted variable its ``why`` explains.

Why these steps (measured on the HTP simulator): marking every tensor blocks ORT's graph fusions, and
fusions change HTP numerics as a whole-graph effect — PP-OCR rec's output went from 30.8 dB (unmarked)
to 46.3 dB with ``ConvBNFusion`` off, MiniLM's from 37.8 dB to 48.3 dB with ``MatMulAddFusion`` off. So
a precision verdict is followed by a re-dump with the fusion off and by the unmarked outputs, which
every htp-sim run keeps in ``unmarked_outputs.npz``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..mnn.soc import DEFAULT_SOC
from ..next_step import Arg, NextStep, Var, step
from ..runstore import INPUTS_FILE, REFERENCE_DIR
from . import fmt

if TYPE_CHECKING:
    from .schema import CompareResult

WRONG_NUMBERS = "playbooks/wrong-numbers.md"
SHAPE_MUTABLE = "playbooks/shape-mutable.md"
UNMARKED_OUTPUTS = "unmarked_outputs.npz"  # written by every htp-sim run (workers/htp_worker.py)
# Marked vs unmarked outputs closer than this to the output's own error: marking changed what is measured.
OBSERVER_MARGIN_DB = 10.0

MODEL = Var("MODEL", "the .onnx model the baseline was built from")
MNN_MODEL = Var("MNN_MODEL", "the .mnn model the device ran")
TESTDIR = Var("TESTDIR", "the MNN test dir the run used")
INPUTS = Var("INPUTS", "the .npz of inputs the baseline used")
FIXED_MODEL = Var("FIXED_MODEL", "the edited .onnx model")
FIXED_BASELINE = Var("FIXED_BASELINE", "a new output folder")
NEW_BASELINE = Var("NEW_BASELINE", "a new output folder")
NEW_TARGET = Var("NEW_TARGET", "the new dump (run folder, MNN dump folder or .npz)")
QDQ_MODEL = Var("QDQ_MODEL", "the re-calibrated QDQ .onnx model")
FLOAT_MODEL = Var("FLOAT_MODEL", "the float .onnx model before quantization")
EXPORT_DIR = Var("EXPORT_DIR", "the llmexport output folder (the one holding llm.mnn)")


def next_steps(r: CompareResult) -> list[NextStep]:
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


def _baseline_dir(r: CompareResult) -> Path:
    """The baseline directory when the reference is a baseline's ``reference/`` run, else the reference itself."""
    ref = Path(r.reference)
    return ref.parent if ref.name == REFERENCE_DIR and r.floor is not None else ref


def _inputs(r: CompareResult) -> list[Arg]:
    ref = Path(r.reference)
    return ["--inputs", _baseline_dir(r) / INPUTS_FILE if ref.name == REFERENCE_DIR else INPUTS]


def _model(r: CompareResult) -> Arg:
    return r.model if r.model else MODEL


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


def _precision(r: CompareResult) -> list[NextStep]:
    if not _is_htp_sim(r):
        return _precision_mnn(r)
    base, run = _baseline_dir(r), Path(r.target)
    steps = [_observer_step(r, base, run)]
    fusions = _fusions(r)
    for opt in fusions:
        steps += _redump_steps(r, base, run, [opt], f"ORT's {opt} off")
    if not fusions:  # neither measured culprit is in this graph: try the other known fusions in one go
        steps += _redump_steps(r, base, run, _other_fusions(), "the other ORT fusions off")
    last = steps[-1]
    last.why = (f"{last.why.rstrip('.')}; if none of this changes the error, the loss is HTP's fp16 arithmetic "
                f"itself (rounding accumulated along the graph, or a LUT op such as Sigmoid or Softmax amplified "
                f"downstream), not a wrong op: see {WRONG_NUMBERS} (fp16 noise vs bug).")
    return steps


def _other_fusions() -> list[str]:
    from ..targets.htp_sim import KNOWN_OPTIMIZERS

    return [o for o in KNOWN_OPTIMIZERS if o not in ("ConvBNFusion", "MatMulAddFusion")]


def _redump_steps(r: CompareResult, base: Path, run: Path, optimizers: list[str], what: str) -> list[NextStep]:
    """Re-dump on the simulator with ``optimizers`` disabled, then compare marked tensors and unmarked outputs."""
    precision: list[Arg] = ["--precision", r.precision] if r.precision in ("fp16", "quantized") else []
    new = run.with_name(f"{run.name}-no-{'-'.join(optimizers) if len(optimizers) == 1 else 'fusions'}")
    return [
        step("dump_qnn", ["dump", _model(r), "--target", "htp-sim", *precision, *_inputs(r),
                          "--option", f"disabled_optimizers={','.join(optimizers)}", "--out", new],
             f"Re-dump with {what} (fusions change HTP numerics; marking blocks some of them); add the original "
             f"--soc/--arch if not soc {DEFAULT_SOC}."),
        step("compare", ["compare", base, new], f"Compare the re-dump with {what} tensor by tensor."),
        step("compare", ["compare", base, new / UNMARKED_OUTPUTS],
             f"Compare the re-dump's unmarked outputs with {what} (the graph as shipped)."),
    ]


def _observer_step(r: CompareResult, base: Path, run: Path) -> NextStep:
    """Compare the unmarked outputs (the graph as shipped) with the marked per-layer errors."""
    effect = r.observer_effect_db or {}
    marked = {t.name: t.metrics.get("sqnr_db") for t in r.tensors if t.name in effect}
    pairs = "; ".join(f"{k}: marked output SQNR {fmt.db_unit(marked.get(k))}, marked vs unmarked {fmt.observer(v)}"
                      for k, v in effect.items())
    return step("compare", ["compare", base, run / UNMARKED_OUTPUTS],
                f"Compare the unmarked output error with these marked per-layer errors: this measures the outputs "
                f"of the graph as shipped (no tensor marked); observer effect here ({pairs}): "
                f"{_observer_reading(marked, effect)}")


def _observer_reading(marked: dict[str, float | None], effect: dict[str, float]) -> str:
    """Whether marking moved the outputs by as much as their error (then the per-layer numbers mislead)."""
    close = [k for k, v in effect.items() if marked.get(k) is not None and v < (marked[k] or 0.0) + OBSERVER_MARGIN_DB]
    if close:
        return (f"marking moved {', '.join(close)} by about as much as the error itself, so the marked per-layer "
                f"errors describe a different graph; trust the unmarked comparison and bisect with the fusions below.")
    return ("marking barely moved the outputs compared with their error, so the marked per-layer errors describe "
            "the graph as shipped.")


def _precision_mnn(r: CompareResult) -> list[NextStep]:
    """MNN targets (device, host, MNN dumps): ORT fusions do not apply; check fp16 itself.

    No step suggests MNN ``precision=High`` as an fp32 check: on HTP the QNN graph is fp16 either way (graph
    precision FLOAT16 in MNN's QNN backend, ``fp16_relaxed_precision`` in the offline path)."""
    return [
        step("run_on_device", ["run", MNN_MODEL, "--target", "device", "--forward", "cpu", "--precision", "low",
                               "--baseline", _baseline_dir(r)],
             "Get a device-side fp16 floor by running the .mnn on the phone's CPU in fp16: an error of the same size "
             "there is fp16, not a wrong op (precision high is no fp32 check on HTP: its graph precision stays "
             "FLOAT16)."),
        step("diagnose", ["diagnose", _model(r), "--target", "htp-sim"],
             f"See how the same ONNX model behaves on the simulator, where fusion effects can be toggled; "
             f"background: {WRONG_NUMBERS} (fp16 noise vs bug)."),
    ]


def _fp16_range(r: CompareResult, ev: dict[str, Any]) -> list[NextStep]:
    """Remedies for a model that is not fp16-safe, each with why, most targeted first; each is checked by
    diagnosing the edited model, and the baseline of the edited model lists what is still out of range."""
    op, tensor, k = ev.get("op"), ev.get("tensor"), ev.get("rescale_exponent")
    source, construct = ev.get("rescale_input"), ev.get("scale_invariant")
    ref_max = float(ev.get("reference_max_abs") or 0.0)
    scale = f"2^-{k}" if k else "2^-k"
    where = f"`{source}` (the input of {op})" if source else f"the input of {op}"
    squaring = bool(ev.get("squaring"))
    shrink = "squares shrink with the square of the factor, so " if squaring else ""
    after = ref_max / (4.0 if squaring else 2.0) ** int(k or 1)
    check: list[Arg] = ["diagnose", FIXED_MODEL, "--target", "htp-sim", *_inputs(r)]
    remedies = []
    if construct:
        why = {"L2-norm": "x / ||x|| is unchanged when x is scaled",
               "RMSNorm": "x / rms(x) is unchanged when x is scaled (scale eps by the square of the factor)",
               "LayerNorm": "(x - mean) / std is unchanged when x is scaled (scale eps by the square of the factor)",
               "Softmax input": "softmax(x - max(x)) equals softmax(x), and the shifted logits stay small"}[str(construct)]
        remedies.append(f"Rescale by a power of two around the scale-invariant {construct}: multiply {where} by "
                        f"{scale} before it ({shrink}`{tensor}` drops from {ref_max:.3g} to about {after:.3g}, inside "
                        f"fp16's 65504), then diagnose the edited model; why: {why}, and a power of two is exact in "
                        f"fp16, so nothing else changes.")
    else:
        remedies.append(f"Rescale by a power of two: multiply {where} by {scale} and undo it after the value is back "
                        f"in range (`{tensor}` reaches {ref_max:.3g}; fp16 holds 65504, HTP saturates at 131008), "
                        f"then diagnose the edited model; why: a power of two is exact in fp16, so only the range "
                        f"changes.")
    remedies.append(f"Or move the reduction earlier: average instead of summing (ReduceMean, or divide by the count "
                    f"before {op}) so partial results stay in range, then diagnose the edited model; why: a sum of N "
                    f"squares grows N times faster than its mean, and the mean is what the normalisation needs.")
    remedies.append(f"Or keep this region off the NPU (run {op} and its normalisation on CPU, split the graph there), "
                    "then diagnose the edited model; why: MNN's precision=High does not help — on HTP the QNN graph is "
                    "fp16 either way (graph precision FLOAT16; the offline path sets fp16_relaxed_precision), so only "
                    "another backend holds the value.")
    steps = [step("diagnose", check, why) for why in remedies]
    steps.append(step("baseline", ["baseline", FIXED_MODEL, *_inputs(r), "--out", FIXED_BASELINE],
                      "After the change, check the range before the device: the baseline of the edited model lists "
                      "the tensors that are still not fp16-safe (baseline.json `ranges`)."))
    return steps


def _real_bug(r: CompareResult) -> list[NextStep]:
    ff = r.first_failing
    pattern = f" for the `{r.verdict.pattern}` pattern" if r.verdict.pattern != "none" else ""
    playbook = (f"then follow {WRONG_NUMBERS}{pattern}: the classic causes of a wrong op in MNN's QNN backend and "
                f"how to confirm each")
    op: Arg = ff.op_type if ff is not None and ff.op_type else Var("OP_TYPE", "the first failing op's type")
    where = f" ({ff.op})" if ff is not None and ff.op else ""
    subject = ff.op_type if ff is not None and ff.op_type else "the op"
    steps = [step("lookup_op_constraints", ["op", op, "--probe"],
                  f"Check {subject}'s QNN/HTP constraints{where} and known MNN traps, and try it alone on the "
                  f"simulator; {playbook}.")]
    if "local_error" in r.verdict.evidence:
        steps.append(step("compare", ["compare", _baseline_dir(r), r.target, "--model", _model(r)],
                          "Let compare re-run the op on CPU to confirm."))
    return steps


def _input_not_copied(r: CompareResult) -> list[NextStep]:
    """Zeros: the input was not copied. A copy that differs otherwise may just be a baseline built from other
    data, which is the cheaper check, so it comes first."""
    steps = []
    mismatch = r.verdict.evidence.get("input_mismatch")
    if isinstance(mismatch, dict):
        mnn: list[Arg] = ["--mnn-model", MNN_MODEL] if r.target_kind == "mnn-dump" else []
        steps.append(step("baseline", ["baseline", _model(r), "--inputs", TESTDIR, "--out", NEW_BASELINE],
                          f"Rebuild the baseline from the inputs the device used (the MNN test dir, or an .npz of "
                          f"{mismatch.get('input')!r} as it was fed)."))
        steps.append(step("compare", ["compare", NEW_BASELINE, r.target, *mnn],
                          "Compare again with the rebuilt baseline"
                          + (" (with the same --mnn-model)" if mnn else "")
                          + ": if the input then matches, the first comparison only used other data."))
    first = "Otherwise set" if steps else "Set"
    steps.append(step("toggle_shapeMutable", ["toggle-shape-mutable", TESTDIR, "--value", "false"],
                      f"{first} shapeMutable to false in the MNN test dir the run used; why online QNN needs it, and "
                      f"the other shape traps: {SHAPE_MUTABLE}."))
    steps.append(step("run_on_device", ["run", MNN_MODEL, "--testdir", TESTDIR],
                      "Run the test dir again with shapeMutable false, then compare again."))
    return steps


def _encoding_range(r: CompareResult, ev: dict[str, Any]) -> list[NextStep]:
    """A device encoding that clips the data: widen it where it is set, then check again."""
    tensor = ev.get("tensor")
    lo, hi = ev.get("device_range") or [None, None]
    rlo, rhi = ev.get("reference_range") or [None, None]
    model = ev.get("model_range")
    calibrated = (f"; the model's own QDQ encoding spans [{model[0]:.4g}, {model[1]:.4g}], so the device run used "
                  f"another encoding than the model's (a re-export, an inherited scale, or calibration on other data)"
                  if isinstance(model, list) and None not in model else "")
    return [
        step("compare", ["compare", _baseline_dir(r), NEW_TARGET],
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


def _quantization(r: CompareResult) -> list[NextStep]:
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
        step("diagnose", ["diagnose", QDQ_MODEL, "--precision", "quantized"],
             f"Check the encodings and calibration of {where}: its scale/offset (`tensors[].quant` in "
             f"{Path(r.target) / 'run.json'}) against its real value range{span} — a range calibrated much wider "
             f"than the data wastes steps, a narrower one clips; if the encodings match the data but the loss is "
             f"too large, re-calibrate with representative inputs or 16-bit activations (onnxruntime.quantization "
             f"get_qnn_qdq_config, activation_type=QUInt16) and diagnose again."),
        step("baseline", ["baseline", FLOAT_MODEL, *_inputs(r)],
             f"To see what quantization costs against fp32, build a baseline of the float model on the same inputs "
             f"and compare this run with it; background: {WRONG_NUMBERS}."),
    ]
