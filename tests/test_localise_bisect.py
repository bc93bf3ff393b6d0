"""``qnn-debug bisect`` on the HTP simulator and on the fake phone: injected bugs found in ~log2 N probes.

Phones are test doubles (fake adb + fake ModuleBasic running real MNN CPU); the simulator is real.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from doubles.fake_phone import FakePhone
from qnn_debug.errors import BadInputError
from qnn_debug.examples import deep_conv_net, small_cnn
from qnn_debug.inject import inject
from qnn_debug.localise.bisect import BisectRequest, run_bisect

CLI = str(Path(sys.executable).parent / "qnn-debug")


def _pair(tmp: Path, model: onnx.ModelProto, kind: str, node: str, **params: object) -> tuple[Path, Path]:
    onnx.save(model, str(tmp / "model.onnx"))
    onnx.save(inject(model, kind, node, **params), str(tmp / "bug.onnx"))
    return tmp / "model.onnx", tmp / "bug.onnx"


@pytest.mark.parametrize(("blocks", "size", "kind", "node"), [
    (8, 16, "conv_on_zeros", "b5_conv"),
    (12, 24, "scale_output", "b2_bn"),
])
def test_bisect_finds_the_injected_op_in_log2_probes(tmp_path: Path, blocks: int, size: int, kind: str, node: str) -> None:
    model = deep_conv_net(blocks=blocks, size=size, seed=blocks)
    original, edited = _pair(tmp_path, model, kind, node)
    result = run_bisect(BisectRequest(model=edited, reference_model=original, out=tmp_path / "out", mnn_gate=False))
    assert result.verdict == "real_bug" and result.first_failing is not None
    assert result.first_failing.op == node, result.probes
    assert (result.first_failing.excess_db or 0) >= 15
    assert len(result.probes) <= math.ceil(math.log2(result.cut_points)) + 1
    assert (tmp_path / "out" / "bisect.json").is_file()


def test_bisect_of_a_healthy_model_blames_nothing_through_the_cli(tmp_path: Path) -> None:
    onnx.save(small_cnn(seed=3), str(tmp_path / "m.onnx"))
    res = subprocess.run([CLI, "bisect", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "o"), "--no-mnn-gate",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "ok" and doc["first_failing"] is None and len(doc["probes"]) == 1


def test_bisect_refuses_an_mnn_model_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "m.mnn").write_bytes(b"x")
    with pytest.raises(BadInputError, match="truncates ONNX"):
        run_bisect(BisectRequest(model=tmp_path / "m.mnn", out=tmp_path / "o"))
    res = subprocess.run([CLI, "bisect", str(tmp_path / "m.mnn"), "--json"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and json.loads(res.stdout)["error"] == "bad_input"


def test_bisect_on_the_fake_phone_uses_cpu_fp32_and_fp16_as_reference_and_floor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    original, edited = _pair(tmp_path, small_cnn(seed=1), "conv_on_zeros", "conv2")
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    result = run_bisect(BisectRequest(model=edited, reference_model=original, out=tmp_path / "out", target="device",
                                      inputs=tmp_path / "in.npz", opencl=True))
    assert result.first_failing is not None and result.first_failing.op == "conv2"
    assert "same device" in result.floor
    runs = [c[-1] for c in phone.calls() if "bin/ModuleBasic.out /" in c[-1]]
    # argv after the test dir: runMask forwardType runLoops threads mask (precision + 4*memory)
    seen = {(cmd.split("/testdir ")[1].split()[1], cmd.split("/testdir ")[1].split()[4]) for cmd in runs}
    assert {("5", "2"), ("0", "1"), ("0", "2"), ("3", "2")} == seen
    assert all(p.worst is None or "opencl_fp16_sqnr_db" in p.worst.opinions for p in result.probes)


@pytest.mark.anyio
async def test_bisect_through_mcp_names_the_injected_op(tmp_path: Path) -> None:
    from test_mcp_support import connect, ok

    _pair(tmp_path, small_cnn(seed=2), "conv_on_zeros", "conv2")
    async with connect(tmp_path, "auto") as client:
        answer = ok(await client.call_tool("bisect", {"model": "bug.onnx", "reference_model": "model.onnx",
                                                      "mnn_gate": False, "background": False}))
    result = answer["result"]
    assert result["first_failing"]["op"] == "conv2" and result["verdict"] == "real_bug"
    assert result["out"].startswith(str(tmp_path))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
