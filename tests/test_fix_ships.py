"""What ``compare`` advises for an fp16-range finding is never less safe than what ``fix`` writes: on a dark sample of
raw pixels (the sample needs a smaller power of two than the declared 0..255 range), the comparison sends the user to
``fix --input-range`` first and says its own exponent only as what the sample alone needs — on the project's L2-norm
models (the scale folded into a Conv; a Mul on the graph input)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from diagnose_cli import diagnose_cli
from numerics_models import l2norm_net, pixels
from qnn_debug.cli import app

runner = CliRunner()
# An imperative exponent: "by 2^-4", "fold 2^-4 into", "Mul(`x`, 2^-4)" — a number the user would apply as is.
IMPERATIVE = re.compile(r"(?:\bby|\bfold|Mul\([^)]*,)\s*2\^-(\d+)")


@pytest.mark.parametrize(("variant", "conv"), [("global", True), ("pow", False)])
def test_compare_advice_is_never_less_safe_than_the_fix(tmp_path: Path, variant: str, conv: bool) -> None:
    sample = np.round(pixels(3, 24) * 0.3).astype(np.float32)  # a dark image: the sample understates the range
    out = diagnose_cli(tmp_path, "l2", l2norm_net(variant=variant, conv=conv, channels=3, size=24), {"x": sample})
    c = out["compare"]
    k = c["verdict"]["evidence"]["fp16_range"]["rescale_exponent"]
    res = runner.invoke(app, ["fix", str(tmp_path / "l2"), "--input-range", "x=0:255", "--out", str(tmp_path / "fix"),
                              "--cases", str(tmp_path / "cases.jsonl"), "--json"])
    fixed = json.loads(res.stdout)
    (site,) = fixed["sites"]
    assert site["exponent"] > k  # the declared range needs more than the sample
    steps = c["next_steps"]
    assert steps[0]["tool"] == "fix_and_prove" and "--input-range" in steps[0]["cli"]  # the safe one first
    printed = [c["verdict"]["summary"], *(s["why"] for s in steps)]
    applied = [int(n) for text in printed for n in IMPERATIVE.findall(text)]
    assert all(n >= site["exponent"] for n in applied), (applied, site["exponent"], printed)
    assert f"this sample alone needs 2^-{k}" in c["verdict"]["summary"] and "qnn-debug fix" in c["verdict"]["summary"]
    text = runner.invoke(app, ["compare", str(tmp_path / "l2" / "baseline"), str(tmp_path / "l2" / "htp-sim"),
                               "--model", str(tmp_path / "l2.onnx")]).stdout
    assert not [n for n in IMPERATIVE.findall(text) if int(n) < site["exponent"]], text


@pytest.mark.parametrize("conv", [False, True])
def test_a_dropped_fused_relu_is_named_and_sends_the_user_to_fix(tmp_path: Path, conv: bool) -> None:
    """The Deconvolution (or Convolution) head whose dump lost the fused Relu: the pattern says so and `fix` is the
    first step (before the op probe, which only says QNN accepts the op)."""
    from test_fix import _relu_lost

    c = json.loads(_relu_lost(tmp_path, conv).read_text())
    assert c["verdict"]["kind"] == "real_bug" and c["verdict"]["pattern"] == "fused_activation_dropped"
    tools = [s["tool"] for s in c["next_steps"]]
    assert tools[0] == "fix_and_prove" and "lookup_op_constraints" in tools[1:], tools
    assert "up_relu" in c["next_steps"][0]["why"] and ("Convolution" if conv else "Deconvolution") in c["next_steps"][0]["why"]
    text = runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump")]).stdout
    assert "qnn-debug fix" in text and "fused_activation_dropped" in text
    ff = c["first_failing"]  # the fused op's own output, by its dump name and file
    assert ff["dump_tensor"] == ff["fused"]["target_tensor"] and Path(ff["dump_file"]).is_file(), ff
    line = next(ln for ln in text.splitlines() if ln.startswith("first failing:"))
    kind = "Convolution" if conv else "Deconvolution"
    assert f"MNN ran it as op 'up' ({kind}), fusing up (" in line and f"in the dump it is {ff['dump_tensor']}: file " in line


@pytest.mark.parametrize("conv", [False, True])
def test_unaligned_tensors_are_counted_by_reason(tmp_path: Path, conv: bool) -> None:
    from test_fix import _relu_lost

    c = json.loads(_relu_lost(tmp_path, conv).read_text())
    reasons = c["unaligned_by_reason"]
    assert c["counts"]["unaligned"] > 0 and sum(reasons.values()) == c["counts"]["unaligned"], reasons
    text = runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "dump"), "--report",
                               str(tmp_path / "rep")]).stdout
    line = next(ln for ln in text.splitlines() if "not aligned, by reason:" in ln)
    top, n = next(iter(reasons.items()))
    assert f"{n} {top}" in line
    assert f"| {n} | {top} |" in (tmp_path / "rep" / "compare.md").read_text()


@pytest.mark.parametrize(("variant", "conv"), [("global", True), ("pow", False)])
def test_a_gate_on_the_fixed_mnn_reports_that_file(tmp_path: Path, variant: str, conv: bool) -> None:
    """`baseline MODEL.onnx --mnn-model MODEL.fp16-rescaled.mnn`: the file given is what the gate is about — its own
    fp16 range (safe), not the original ONNX's (sumsq beyond 65504); the gate passes, so it names no divergent
    tensor, and the rescaled sumsq (another value under the same ONNX name) is said not to count, and why."""
    sample = np.round(pixels(3, 24)).astype(np.float32)
    diagnose_cli(tmp_path, "l2", l2norm_net(variant=variant, conv=conv, channels=3, size=24), {"x": sample})
    res = runner.invoke(app, ["fix", str(tmp_path / "l2"), "--input-range", "x=0:255", "--out", str(tmp_path / "fix"),
                              "--cases", str(tmp_path / "cases.jsonl"), "--json"])
    shipped = json.loads(res.stdout)["mnn"]["path"]
    res = runner.invoke(app, ["baseline", str(tmp_path / "l2.onnx"), "--mnn-model", shipped, "--inputs",
                              str(tmp_path / "l2" / "baseline" / "inputs.npz"), "--out", str(tmp_path / "gate"),
                              "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)["report"]
    gate = report["mnn_model"]["gate"]
    assert gate["status"] == "passed" and gate["first_divergent"] is None, gate
    assert gate["divergent_not_counted"] is not None and "does not count" in gate["not_counted_why"], gate
    assert report["mnn_model"]["ranges"]["unsafe_count"] == 0 and report["ranges"]["unsafe_count"] > 0
    sentence = report["sentence"]
    assert "Your l2.fp16-rescaled.mnn is fp16-safe on these inputs" in sentence, sentence
    assert not re.search(r"(?<!\()Not fp16-safe", sentence) and "not your file's" in sentence, sentence
    text = runner.invoke(app, ["baseline", str(tmp_path / "l2.onnx"), "--mnn-model", shipped, "--inputs",
                               str(tmp_path / "l2" / "baseline" / "inputs.npz"), "--out", str(tmp_path / "gate2")]).stdout
    assert "first divergent" not in text and "not counted:" in text, text


@pytest.mark.parametrize("case", ["ppocr_det", "decoder", "conv_net"])
def test_modulebasic_rule_unreachable_at_the_floor_is_said_where_compare_predicts_it(tmp_path: Path, case: str,
                                                                                      request: pytest.FixtureRequest):
    """PP-OCRv4 det's fp16 floor misses ModuleBasic's 1 % rule on its mask (diff rate ~0.03 at 64x64), an LLM-shaped
    decoder's by far (its outliers leave fp16): compare says a TESTERROR there is expected at fp16. A conv net whose
    floor meets the rule gets no such word."""
    import onnx as onnx_lib

    from numerics_models import decoder_llm, token_ids
    from qnn_debug.examples import deep_conv_net

    if case == "ppocr_det":
        model = onnx_lib.load(str(request.getfixturevalue("ppocr_det")))
        feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    elif case == "decoder":
        model, feeds = decoder_llm(hidden=64, layers=2, tokens=16), {"ids": token_ids(16, 96)}
    else:
        model = deep_conv_net(blocks=2, channels=8, size=16)
        feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    c = diagnose_cli(tmp_path, case, model, feeds)["compare"]
    e2e = c["verdict"]["evidence"]["end_to_end"]
    said = [w for w in c["warnings"] if "ModuleBasic's pass rule" in w]
    if case == "conv_net":
        assert not said and all(v["modulebasic_rule_met_by_floor"] for v in e2e.values()), e2e
        return
    (name,) = [n for n, v in e2e.items() if not v["modulebasic_rule_met_by_floor"]]
    assert e2e[name]["floor_diff_rate"] > 0.01 and len(said) == 1 and repr(name) in said[0], said
    assert "TESTERROR there is expected even from a correct fp16 run" in said[0]
