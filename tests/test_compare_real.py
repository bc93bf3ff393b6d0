"""compare on real models and real dumps: PP-OCR cls on the HTP simulator, QDQ-quantized nets, and the
MNN QNN dumps MNN itself wrote on the simulator (shared fixtures)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_debug.baseline import run_baseline
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.dump import run_dump
from qnn_debug.examples import deep_conv_net
from qnn_debug.targets import DumpRequest


@pytest.mark.slow
def test_ppocr_cls_on_the_simulator_is_healthy(ppocr_cls: Path, tmp_path: Path):
    run_baseline(ppocr_cls, tmp_path / "base", shapes={"x": [1, 3, 48, 192]}, mnn_gate=False)
    run_dump(DumpRequest(model=ppocr_cls, out=tmp_path / "htp", inputs=tmp_path / "base" / "inputs.npz",
                         shapes={"x": [1, 3, 48, 192]}))
    result = compare_paths(tmp_path / "base", tmp_path / "htp", report_dir=tmp_path / "report")
    assert result.verdict.kind in ("ok", "precision"), result.verdict.summary
    assert result.first_failing is None
    assert result.counts["aligned"] > 200 and not result.unaligned
    assert (tmp_path / "report" / "compare.md").read_text().startswith("# qnn-debug compare:")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A deep conv net quantized to QDQ (u8 activations, s8 per-channel weights), dumped on the simulator."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    d = tmp_path_factory.mktemp("quantized")
    onnx.save(deep_conv_net(blocks=6), str(d / "float0.onnx"))
    quant_pre_process(str(d / "float0.onnx"), str(d / "float.onnx"))  # folds BN, as quantization expects

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(7)
            self.batches = iter([{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(str(d / "float.onnx"), str(d / "qdq.onnx"), Calibration(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    run_baseline(d / "float.onnx", d / "float_base", mnn_gate=False)
    run_baseline(d / "qdq.onnx", d / "qdq_base", inputs=d / "float_base" / "inputs.npz", mnn_gate=False)
    run_dump(DumpRequest(model=d / "qdq.onnx", out=d / "htp", precision="quantized",
                         inputs=d / "float_base" / "inputs.npz"))
    return d


@pytest.mark.parametrize("baseline", ["qdq_base", "float_base"])
def test_quantized_model_gives_quantization_not_real_bug(quantized: Path, baseline: str):
    result = compare_paths(quantized / baseline, quantized / "htp")
    assert result.verdict.kind == "quantization", result.verdict.summary
    assert result.first_failing is None
    rows = [r for r in result.tensors if r.quantized]
    assert len(rows) >= 10
    if baseline == "float_base":  # 8-bit costs tens of dB against fp32; the verdict must not call that a bug
        assert max(r.excess_db or 0.0 for r in rows) > 20.0


@pytest.fixture(scope="module")
def mnn_baseline(mnn_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mnn")
    x = np.loadtxt(mnn_fixtures / "testdir" / "x.txt", dtype=np.float32).reshape(1, 3, 32, 32)
    np.savez(d / "inputs.npz", x=x)
    run_baseline(mnn_fixtures / "testdir" / "test.onnx", d / "base", inputs=d / "inputs.npz", mnn_gate=False)
    return d


@pytest.mark.parametrize("dump", ["online_fp16", "offline_fp16", "online_fp32"])
def test_real_mnn_dumps_compare_like_any_run(mnn_fixtures: Path, mnn_baseline: Path, dump: str):
    result = compare_paths(mnn_baseline / "base", mnn_fixtures / "dumps" / dump, mnn_model=mnn_fixtures / "test.mnn")
    assert result.target_kind == "mnn-dump"
    assert result.verdict.kind == "ok" and result.first_failing is None
    rows = {r.name: r for r in result.tensors}
    assert set(rows) >= {"r1", "c2", "y"}  # t<N> mapped to model names, NHWC restored
    want = 100.0 if dump == "online_fp32" else 55.0
    assert all((rows[n].metrics["sqnr_db"] or 0.0) > want for n in ("r1", "c2", "y"))
    # MNN's own stage tensors are rows standing for the model tensor they hold (test_compare_mnn_aliases.py)
    assert rows["c1@ReluTensor"].stands_for == "c1" and not result.unaligned


def test_mnn_dump_with_zeroed_input_copy_is_input_not_copied(mnn_fixtures: Path, mnn_baseline: Path, tmp_path: Path):
    # Test double: the real online fp16 dump, edited to look like MNN's shapeMutable=true failure
    # (the backend's fp16 copy of the input, t0_cast, holds zeros).
    dump = tmp_path / "shape_mutable_true_double"
    shutil.copytree(mnn_fixtures / "dumps" / "online_fp16", dump)
    raw = next(dump.glob("*_t0_cast.raw"))
    raw.write_bytes(bytes(raw.stat().st_size))
    result = compare_paths(mnn_baseline / "base", dump, mnn_model=mnn_fixtures / "test.mnn")
    assert result.verdict.kind == "input_not_copied" and result.verdict.pattern == "zero_input"
    # the first op reading the missing input, seen through conv1's pre-activation stage
    assert result.first_failing is not None and (result.first_failing.tensor, result.first_failing.op) == ("c1", "conv1")
