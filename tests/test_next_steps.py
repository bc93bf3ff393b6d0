"""Every verdict kind's next steps are structured (tool, cli, why) and run as printed.

The results are built directly (each verdict kind and the evidence its steps read), so every branch of the
step wording is reached in milliseconds; the real comparisons in test_compare_ux / test_numerics_* check
the same on runs of real models.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from next_steps_check import check_steps, text
from qnn_debug.compare.rules import next_steps
from qnn_debug.compare.schema import CompareResult, FirstFailing, TensorRow, Verdict
from qnn_debug.next_step import NextStep, Var, command_line, step
from qnn_debug.triage.models import NextStep as TriageNextStep

BASE = "runs/my model/base"  # a space: every path must come out shell-quoted


def _result(kind: str, *, pattern: str = "none", evidence: dict[str, Any] | None = None, target: str = "runs/t 1",
            target_kind: str = "run", observer: dict[str, float] | None = None, op_type: str | None = "Conv",
            model: str | None = "models/m.onnx", types: tuple[str, ...] = ("Conv", "BatchNormalization"),
            precision: str = "fp16") -> CompareResult:
    rows = [TensorRow(name=f"t{i}", op=f"op{i}", op_type=t, position=i, metrics={"sqnr_db": 30.0, "max_abs_ref": 7.5})
            for i, t in enumerate(types)]
    first = FirstFailing(tensor="t0", op="op0", op_type=op_type, position=0) if kind in ("real_bug",) else None
    return CompareResult(reference=f"{BASE}/reference", floor=f"{BASE}/fp16_floor", target=target,
                         target_kind=target_kind, model=model, precision=precision, first_failing=first,
                         verdict=Verdict(kind=kind, pattern=pattern, confidence=0.8, summary="s",  # type: ignore[arg-type]
                                         evidence=evidence or {}),
                         tensors=rows, observer_effect_db=observer)


FP16 = {"op": "sumsq", "tensor": "sumsq", "rescale_exponent": 4, "rescale_input": "x", "scale_invariant": "L2-norm",
        "reference_max_abs": 2.5e6, "squaring": True}
ENCODING = {"tensor": "l0_act", "device_range": [-2.0, 2.0], "reference_range": [-8.0, 8.0], "model_range": [-8.0, 8.0]}
CASES = {
    "precision htp-sim, fusions in the graph": _result("precision", observer={"t1": 45.0}),
    "precision htp-sim, no measured fusion": _result("precision", observer={"t1": 20.0}, types=("Relu",)),
    "precision on an MNN target": _result("precision", target_kind="mnn-dump"),
    "precision without a model": _result("precision", target_kind="npz", model=None),
    "fp16 range, scale-invariant": _result("precision", pattern="fp16_range", evidence={"fp16_range": FP16}),
    "fp16 range, plain": _result("precision", pattern="fp16_range",
                                 evidence={"fp16_range": {**FP16, "scale_invariant": None, "squaring": False}}),
    "real bug": _result("real_bug", pattern="zero_input", evidence={"local_error": "no model"}),
    "real bug, op type unknown": _result("real_bug", op_type=None),
    "input not copied (zeros)": _result("input_not_copied", pattern="zero_input"),
    "input copy differs, MNN dump": _result("input_not_copied", target_kind="mnn-dump",
                                            evidence={"input_mismatch": {"input": "x"}}),
    "quantization": _result("quantization", precision="quantized", evidence={"worst_excess": {"tensor": "t1"}}),
    "quantization, encoding clips": _result("quantization", pattern="encoding_range", precision="quantized",
                                            evidence={"encoding_range": ENCODING}),
}


@pytest.mark.parametrize("case", CASES)
def test_every_verdict_kind_gives_structured_runnable_steps(case: str) -> None:
    steps = next_steps(CASES[case])
    assert steps and all(isinstance(s, NextStep) for s in steps)
    check_steps(steps, run_help=True)
    for s in steps:
        for token in shlex.split(s.cli):  # a variable is explained where it is used
            if token.startswith("$"):
                assert f"set {token[1:]} to " in s.why, s


def test_healthy_runs_have_no_steps() -> None:
    assert next_steps(_result("ok")) == []


def test_steps_keep_the_facts_the_prose_carried() -> None:
    fp16 = text(next_steps(CASES["fp16 range, scale-invariant"]))
    assert "2^-4" in fp16 and "2.5e+06" in fp16 and "about 9.77e+03" in fp16 and "L2-norm" in fp16
    bug = next_steps(CASES["real bug"])
    assert (bug[0].tool, bug[0].cli) == ("lookup_op_constraints", "qnn-debug op Conv --probe")
    assert "`zero_input` pattern" in bug[0].why and "playbooks/wrong-numbers.md" in bug[0].why
    assert bug[1].cli == f"qnn-debug compare {shlex.quote(BASE)} 'runs/t 1' --model models/m.onnx"
    unknown = next_steps(CASES["real bug, op type unknown"])[0]
    assert unknown.cli == 'qnn-debug op "$OP_TYPE" --probe' and "set OP_TYPE to the first failing op's type" in unknown.why
    sim = next_steps(CASES["precision htp-sim, fusions in the graph"])
    assert sim[0].cli == f"qnn-debug compare {shlex.quote(BASE)} 'runs/t 1/unmarked_outputs.npz'"
    assert "marked output SQNR 30.0 dB" in sim[0].why and "marked vs unmarked 45.0 dB" in sim[0].why
    assert [s.tool for s in sim[1:4]] == ["dump_qnn", "compare", "compare"]
    assert "--option disabled_optimizers=ConvBNFusion --out 'runs/t 1-no-ConvBNFusion'" in sim[1].cli
    assert "HTP's fp16 arithmetic itself" in sim[-1].why
    enc = text(next_steps(CASES["quantization, encoding clips"]))
    assert "[-2, 2]" in enc and "[-8, 8]" in enc and "Mul output" in enc and "encoding_range" in enc
    quant = text(next_steps(CASES["quantization"]))
    assert "'t1'" in quant and "±7.5" in quant and "runs/t 1/run.json" in quant and "QUInt16" in quant


def test_the_step_builder_quotes_and_explains() -> None:
    s = step("compare", ["compare", "a b", Var("NEW", "the new dump"), "--x=1;rm"], "Compare again.")
    assert s.cli == "qnn-debug compare 'a b' \"$NEW\" '--x=1;rm'"
    assert s.why == "Compare again (set NEW to the new dump)."
    assert command_line(["op", "Weird;rm"]) == "qnn-debug op 'Weird;rm'"
    assert TriageNextStep is NextStep  # triage and compare hand out the same model
