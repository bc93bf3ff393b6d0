"""fp16 range: HTP's exponent-31 codes are finite, the baseline says which tensors are not fp16-safe, and the
verdict of a model that leaves the fp16 range is precision/fp16_range at the first op that does, with remedies —
L2-norm on raw pixels and an LLM-shaped decoder with large residual channels, on the HTP simulator, through
diagnose (CLI) and compare on an .npz of the same run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from diagnose_cli import diagnose_cli
from doubles.htp_fp16 import htp_fp16_bits
from doubles.mnn_formats import write_dump
from numerics_models import decoder_llm, l2norm_net, pixels, token_ids
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.htp_fp16 import decode_fp16
from qnn_debug.mnn.dump_reader import import_mnn_dump
from qnn_debug.runstore import load_run


def test_exponent_31_codes_are_finite_htp_values_and_ieee_only_on_request():
    codes = np.array([0x3C00, 0x7BFF, 0x7C00, 0x7E00, 0x7FFF, 0xFC00, 0xFFFF], dtype=np.uint16)
    htp = decode_fp16(codes.view(np.float16))
    np.testing.assert_array_equal(htp.values, [1.0, 65504.0, 65536.0, 98304.0, 131008.0, -65536.0, -131008.0])
    assert (htp.extended, htp.saturated) == (5, 2)
    ieee = decode_fp16(codes.view(np.float16), "ieee")
    assert int(np.count_nonzero(~np.isfinite(ieee.values))) == 5 and ieee.extended == 0


def test_dump_with_exponent_31_codes_imports_finite_and_counts_them(tmp_path: Path):
    big = np.array([[1.0, 70000.0, -99000.0, 131008.0, 5e6]], dtype=np.float32)
    write_dump(tmp_path / "d", 0, [("sumsq", htp_fp16_bits(big), 534), ("ok", np.ones((1, 4), np.float16), 534)])
    run = import_mnn_dump(tmp_path / "d", out=tmp_path / "run")
    got = run.array("sumsq")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, [[1.0, 70016.0, -99008.0, 131008.0, 131008.0]])
    info = run.record.extra["htp_fp16"]
    assert info["codes"] == "htp" and info["extended_values"] == 4 and info["saturated_values"] == 2
    assert info["tensors"] == {"sumsq": {"extended": 4, "saturated": 2}}
    assert any("131008" in w for w in run.record.warnings)
    assert "131008" in (run.info("sumsq").label or "")




# (variant, channels, size): three ways of writing an L2-norm, several sizes
L2_CASES = [("global", 3, 32), ("channel", 3, 24), ("pow", 4, 16)]


@pytest.mark.parametrize(("variant", "channels", "size"), L2_CASES)
def test_l2norm_on_raw_pixels_is_precision_fp16_range_at_the_sum_of_squares(tmp_path: Path, variant: str, channels: int,
                                                                          size: int):
    out = diagnose_cli(tmp_path, "l2", l2norm_net(variant=variant, channels=channels, size=size),
                    {"x": pixels(channels, size)})
    c = out["compare"]
    v, ff = c["verdict"], c["first_failing"]
    assert (v["kind"], v["pattern"]) == ("precision", "fp16_range"), v["summary"]
    assert ff["op"] == "sumsq" and ff["tensor"] == "sumsq"
    ev = v["evidence"]["fp16_range"]
    assert ev["reference_max_abs"] > 65504 and ev["inputs_max_abs"] <= 65504
    assert ev["target_at_rail"] > 0 and ev["rail"] == 131008.0
    assert "not fp16-safe" in v["summary"] and "sumsq" in v["summary"]
    steps = " ".join(s["why"] for s in c["next_steps"])
    assert "L2-norm" in steps and "2^-" in steps and "off the NPU" in steps and "precision=High does not" in steps
    assert "Not fp16-safe: `sumsq` reaches" in out["baseline_sentence"]
    report = json.loads((tmp_path / "l2" / "baseline" / "baseline.json").read_text())
    assert report["ranges"]["unsafe"][0]["tensor"] == "sumsq"


@pytest.mark.parametrize(("variant", "channels", "size"), L2_CASES[:2])
def test_rescaled_l2norm_is_ok(tmp_path: Path, variant: str, channels: int, size: int):
    out = diagnose_cli(tmp_path, "l2s", l2norm_net(variant=variant, channels=channels, size=size, scale=1 / 256),
                    {"x": pixels(channels, size)})
    v = out["compare"]["verdict"]
    assert v["kind"] == "ok", v["summary"]
    report = json.loads((tmp_path / "l2s" / "baseline" / "baseline.json").read_text())
    assert report["ranges"]["unsafe_count"] == 0 and "fp16-safe" not in out["baseline_sentence"]


# (hidden, layers, outlier magnitude): LLM-typical residual outliers, hundreds to thousands
DECODER_CASES = [(64, 2, 1500.0), (128, 1, 400.0)]


@pytest.mark.parametrize(("hidden", "layers", "big"), DECODER_CASES)
def test_llm_decoder_with_outlier_channels_overflows_at_the_first_rmsnorm(tmp_path: Path, hidden: int, layers: int,
                                                                          big: float):
    model = decoder_llm(hidden=hidden, layers=layers, big_value=big, tokens=16)
    out = diagnose_cli(tmp_path, "dec", model, {"ids": token_ids(16, 96)})
    v, ff = out["compare"]["verdict"], out["compare"]["first_failing"]
    assert (v["kind"], v["pattern"]) == ("precision", "fp16_range"), v["summary"]
    assert ff["op"] == "l0_in_norm_pow"
    assert v["evidence"]["fp16_range"]["scale_invariant"] == "RMSNorm"
    assert "RMSNorm" in " ".join(s["why"] for s in out["compare"]["next_steps"])
    # the same run brought as an .npz: the same answer
    run = load_run(tmp_path / "dec" / "htp-sim")
    np.savez(tmp_path / "dec.npz", **{t.name: np.asarray(run.array(t.name)) for t in run.tensors})
    res = compare_paths(tmp_path / "dec" / "baseline", tmp_path / "dec.npz")
    assert (res.verdict.kind, res.verdict.pattern) == ("precision", "fp16_range"), res.verdict.summary
    assert res.first_failing is not None and res.first_failing.op == "l0_in_norm_pow"
