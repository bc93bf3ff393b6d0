"""The wording stage's next steps: a finished result becomes structured steps (for every verdict but the range
findings, which are in :mod:`.steps_range`).

Next steps are structured (:class:`~qnn_debug.next_step.NextStep`: MCP tool, runnable ``qnn-debug`` line,
why) and derived from the comparison alone — its paths, verdict, op types and observer effect — so the CLI,
the MCP tools, the report and the engine API all show the same ones (``CompareResult.next_steps``). Every
step carries a command: advice that has none of its own (edit the model, re-calibrate) rides on the
command that carries it out or checks it, and a value only the user knows is a quoted variable its ``why``
explains. A verdict without a next step leaves the user stuck exactly when the answer is "precision, no
single op" (PP-OCR rec on the simulator: ~18 dB below the floor, no op to blame).

Why these steps (measured on the HTP simulator): marking every tensor blocks ORT's graph fusions, and
fusions change HTP numerics as a whole-graph effect — PP-OCR rec's output went from 30.8 dB (unmarked)
to 46.3 dB with ``ConvBNFusion`` off, MiniLM's from 37.8 dB to 48.3 dB with ``MatMulAddFusion`` off. So
a precision verdict is followed by a re-dump with the fusion off and by the unmarked outputs, which
every htp-sim run keeps in ``unmarked_outputs.npz``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..mnn.soc import DEFAULT_SOC
from ..next_step import Arg, NextStep, Var, step
from ..runstore import INPUTS_FILE, REFERENCE_DIR
from . import fmt

if TYPE_CHECKING:
    from ..targets.base import Target
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
THIS_RESULT = Var("THIS_RESULT", "this comparison: the diagnose --out folder, or the file compare --json FILE wrote")
INPUT_RANGE = Var("INPUT_RANGE", "each float input's real range as NAME=MIN:MAX, e.g. x=0:255 for raw pixels")



def baseline_dir(r: CompareResult) -> Path:
    """The baseline directory when the reference is a baseline's ``reference/`` run, else the reference itself."""
    ref = Path(r.reference)
    return ref.parent if ref.name == REFERENCE_DIR and r.floor is not None else ref


def input_args(r: CompareResult) -> list[Arg]:
    ref = Path(r.reference)
    return ["--inputs", baseline_dir(r) / INPUTS_FILE if ref.name == REFERENCE_DIR else INPUTS]


def _model(r: CompareResult) -> Arg:
    return r.model if r.model else MODEL


def _mnn_model(r: CompareResult) -> Arg:
    return r.mnn_model if r.mnn_model else MNN_MODEL


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


def undecided_steps(r: CompareResult) -> list[NextStep]:
    """What the verdict lacks: a floor and a re-run, both of which come from the ONNX model."""
    model: Arg = r.model if r.model and str(r.model).lower().endswith(".onnx") else MODEL
    ref = Path(r.reference)
    saved = ref.parent / INPUTS_FILE  # a baseline's reference/ (an .mnn baseline has no floor but has its inputs)
    inputs: list[Arg] = ["--inputs", saved if ref.name == REFERENCE_DIR and saved.is_file() else INPUTS]
    mnn: list[Arg] = ["--mnn-model", _mnn_model(r)] if r.target_kind == "mnn-dump" else []
    return [step("baseline", ["baseline", model, *inputs, "--out", NEW_BASELINE],
                 "Build the reference and its fp16 floor from the ONNX model with the inputs the target ran: the floor "
                 "says how much error fp16 alone gives."),
            step("compare", ["compare", NEW_BASELINE, r.target, "--model", model, *mnn],
                 "Compare again against that baseline: the suspect op is re-run on the target's own inputs and the "
                 "verdict becomes real_bug, precision or ok.")]


def precision_steps(r: CompareResult) -> list[NextStep]:
    if not _is_htp_sim(r):
        return _precision_mnn(r)
    base, run = baseline_dir(r), Path(r.target)
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


def _fusion_target() -> Target:
    """The target whose options switch graph fusions off: the fusions and the option come from its own hints."""
    from ..targets import TARGETS, target

    return next(target(n) for n in TARGETS if target(n).capabilities.fusion_switches)


def _other_fusions() -> list[str]:
    return [o for o in _fusion_target().known_fusions() if o not in ("ConvBNFusion", "MatMulAddFusion")]


def _redump_steps(r: CompareResult, base: Path, run: Path, optimizers: list[str], what: str) -> list[NextStep]:
    """Re-dump on the simulator with ``optimizers`` disabled, then compare marked tensors and unmarked outputs."""
    precision: list[Arg] = ["--precision", r.precision] if r.precision in ("fp16", "quantized") else []
    new = run.with_name(f"{run.name}-no-{'-'.join(optimizers) if len(optimizers) == 1 else 'fusions'}")
    tgt = _fusion_target()
    return [
        step("dump_qnn", ["dump", _model(r), "--target", tgt.name, *precision, *input_args(r),
                          *tgt.fusion_option(optimizers), "--out", new],
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
        step("run_on_device", ["run", _mnn_model(r), "--target", "device", "--forward", "cpu", "--precision", "low",
                               "--baseline", baseline_dir(r)],
             "Get a device-side fp16 floor by running the .mnn on the phone's CPU in fp16: an error of the same size "
             "there is fp16, not a wrong op (precision high is no fp32 check on HTP: its graph precision stays "
             "FLOAT16)."),
        step("diagnose", ["diagnose", _model(r), "--target", "htp-sim"],
             f"See how the same ONNX model behaves on the simulator, where fusion effects can be toggled; "
             f"background: {WRONG_NUMBERS} (fp16 noise vs bug)."),
    ]


def real_bug_steps(r: CompareResult) -> list[NextStep]:
    ff = r.first_failing
    pattern = f" for the `{r.verdict.pattern}` pattern" if r.verdict.pattern != "none" else ""
    playbook = (f"then follow {WRONG_NUMBERS}{pattern}: the classic causes of a wrong op in MNN's QNN backend and "
                f"how to confirm each")
    op: Arg = ff.op_type if ff is not None and ff.op_type else Var("OP_TYPE", "the first failing op's type")
    where = f" ({ff.op})" if ff is not None and ff.op else ""
    subject = ff.op_type if ff is not None and ff.op_type else "the op"
    probe = list(ff.probe) if ff is not None and ff.op_type else []
    shapes = " with its real input shapes and attributes" if probe else ""
    steps = [step("lookup_op_constraints", ["op", op, "--probe", *probe],
                  f"Check {subject}'s QNN/HTP constraints{where} and known MNN traps, and try it alone on the "
                  f"simulator{shapes}; {playbook}.")]
    if "local_error" in r.verdict.evidence:
        steps.append(step("compare", ["compare", baseline_dir(r), r.target, "--model", _model(r)],
                          "Let compare re-run the op on CPU to confirm."))
    return steps


def input_not_copied_steps(r: CompareResult) -> list[NextStep]:
    """Zeros: the input was not copied. A copy that differs otherwise may just be a baseline built from other
    data, which is the cheaper check, so it comes first."""
    steps = []
    mismatch = r.verdict.evidence.get("input_mismatch")
    if isinstance(mismatch, dict):
        mnn: list[Arg] = ["--mnn-model", _mnn_model(r)] if r.target_kind == "mnn-dump" else []
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
    steps.append(step("run_on_device", ["run", _mnn_model(r), "--testdir", TESTDIR],
                      "Run the test dir again with shapeMutable false, then compare again."))
    return steps


def quantization_steps(r: CompareResult) -> list[NextStep]:
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
        step("baseline", ["baseline", FLOAT_MODEL, *input_args(r)],
             f"To see what quantization costs against fp32, build a baseline of the float model on the same inputs "
             f"and compare this run with it; background: {WRONG_NUMBERS}."),
    ]
