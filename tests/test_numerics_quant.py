"""Quantized targets from any source: QDQ A8W8 and A16W8 runs on the HTP simulator brought as an .npz (no dtype,
no encoding) are quantization — healthy with no failing op, a shrunk activation encoding located at its tensor
with the device range and rail share, a wrong op still a real bug — through the engine, the CLI and MCP compare."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from qnn_debug.baseline import run_baseline
from qnn_debug.cli import app
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.dump import run_dump
from qnn_debug.examples import deep_conv_net
from qnn_debug.inject import inject
from qnn_debug.runstore import load_run
from qnn_debug.targets import DumpRequest
from quant_models import activation_points, quantize, shrink_encoding
from test_mcp_support import connect, ok

# (bits, blocks, channels, size): two encodings, two model sizes
CONFIGS = {"a8w8": (8, 4, 16, 16), "a16w8": (16, 3, 8, 16)}


def _setup(d: Path, bits: int, blocks: int, ch: int, size: int) -> tuple[onnx.ModelProto, Path, list[np.ndarray]]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    np.savez(d / "in.npz", x=x)
    cal = [x] + [x + 0.1 * rng.standard_normal(x.shape).astype(np.float32) for _ in range(2)]
    fm = deep_conv_net(blocks=blocks, channels=ch, size=size)
    q = quantize(fm, d / "qdq.onnx", bits, calibration=cal)
    run_baseline(q, d / "base", inputs=d / "in.npz", mnn_gate=False)
    return fm, q, cal


def _as_npz(d: Path, model: Path, name: str) -> Path:
    run_dump(DumpRequest(model=model, out=d / name, precision="quantized", inputs=d / "in.npz"))
    run = load_run(d / name)
    np.savez(d / f"{name}.npz", **{t.name: np.asarray(run.array(t.name)) for t in run.tensors})
    return d / f"{name}.npz"


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def quant_case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    bits, blocks, ch, size = CONFIGS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    fm, q, cal = _setup(d, bits, blocks, ch, size)
    points = activation_points(onnx.load(str(q)))
    shrunk = points[3] if bits == 8 else points[2]  # a mid-network activation (b1_bn / b0_relu)
    onnx.save(shrink_encoding(onnx.load(str(q)), shrunk), str(d / "shrunk.onnx"))
    out = {"dir": d, "bits": bits, "shrunk_tensor": shrunk,
           "healthy": _as_npz(d, q, "healthy"), "shrunk": _as_npz(d, d / "shrunk.onnx", "shrunk")}
    if bits == 8:  # a wrong op in a quantized graph: b2_conv reads zeros (quantized with the same calibration)
        out["bug"] = _as_npz(d, quantize(inject(fm, "conv_on_zeros", "b2_conv"), d / "bug.onnx", bits, calibration=cal),
                             "bug")
    return out


def test_healthy_quantized_npz_is_quantization_with_no_failing_op(quant_case: dict):
    r = compare_paths(quant_case["dir"] / "base", quant_case["healthy"])
    assert r.verdict.kind == "quantization", r.verdict.summary
    assert r.first_failing is None and r.verdict.pattern == "none"
    assert any("QuantizeLinear" in s for s in r.verdict.evidence["quantized_by"])


def test_shrunk_activation_encoding_is_quantization_located_at_that_tensor(quant_case: dict):
    res = CliRunner().invoke(app, ["compare", str(quant_case["dir"] / "base"), str(quant_case["shrunk"]), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    v = out["verdict"]
    assert (v["kind"], v["pattern"]) == ("quantization", "encoding_range"), v["summary"]
    assert out["first_failing"]["tensor"] == quant_case["shrunk_tensor"]
    ev = v["evidence"]["encoding_range"]
    assert ev["reference_outside_share"] > 0.05 and ev["target_at_rail_share"] > 0.05
    assert ev["clipped_reference_sqnr_db"] > ev["target_sqnr_db"] + 10
    lo, hi = ev["device_range"]
    mlo, mhi = ev["model_range"]
    assert 3.0 < (mhi - mlo) / (hi - lo) < 5.0  # the device range is a quarter of the calibrated one
    assert "clips" in v["summary"] and quant_case["shrunk_tensor"] in " ".join(s["why"] for s in out["next_steps"])


def test_wrong_op_in_a_quantized_graph_stays_a_real_bug(quant_case: dict):
    if "bug" not in quant_case:
        pytest.skip("bug case built for the 8-bit model only")
    r = compare_paths(quant_case["dir"] / "base", quant_case["bug"])
    assert r.verdict.kind == "real_bug", r.verdict.summary
    assert r.first_failing is not None and r.first_failing.op == "b2_conv"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_compare_sees_the_clipped_encoding(quant_case: dict):
    d = quant_case["dir"]
    async with connect(d, "auto") as client:
        got = ok(await client.call_tool("compare", {"reference": "base", "target": quant_case["shrunk"].name}))
    v = got["result"]["verdict"]
    assert (v["kind"], v["pattern"]) == ("quantization", "encoding_range"), v["summary"]
    assert got["result"]["first_failing"]["tensor"] == quant_case["shrunk_tensor"]


def test_swiglu_mul_output_with_an_operand_scale_is_quantization_at_the_mul(tmp_path: Path):
    """The LLM exporter case: an A16W8 decoder whose SwiGLU product reuses the `up` operand's encoding saturates at
    a few outlier elements (0.2 % here) that carry most of the error."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType
    from onnxruntime.quantization import quantize as ort_quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from numerics_models import decoder_llm, token_ids
    from quant_models import inherit_encoding

    onnx.save(decoder_llm(hidden=64, layers=1, big_value=3.0, tokens=16), str(tmp_path / "f.onnx"))
    ids = token_ids(16, 96, 1)
    np.savez(tmp_path / "in.npz", ids=ids)

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter([{"ids": ids}, {"ids": token_ids(16, 96, 2)}])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.data, None)

    cfg = get_qnn_qdq_config(str(tmp_path / "f.onnx"), Calibration(), activation_type=QuantType.QUInt16,
                             weight_type=QuantType.QUInt8)
    ort_quantize(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), cfg)
    onnx.save(inherit_encoding(onnx.load(str(tmp_path / "q.onnx")), "l0_act", "l0_up"), str(tmp_path / "bug.onnx"))
    run_baseline(tmp_path / "q.onnx", tmp_path / "base", inputs=tmp_path / "in.npz", mnn_gate=False)
    r = compare_paths(tmp_path / "base", _as_npz(tmp_path, tmp_path / "bug.onnx", "htp"))
    assert (r.verdict.kind, r.verdict.pattern) == ("quantization", "encoding_range"), r.verdict.summary
    assert r.first_failing is not None and r.first_failing.tensor == "l0_act" and r.first_failing.op_type == "Mul"
    assert any("Mul output" in s.why for s in r.next_steps)
