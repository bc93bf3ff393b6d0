"""Block localisation on a phone (``--target device``) through the CLI and MCP, on the tiny Qwen3 export.

The phone, adb and MNN2QNNModel are the project's named test doubles (``tests/doubles``): the fake
MNN2QNNModel wraps the block's real ``.mnn`` (made by the MNN wheel's converter) and the fake phone runs
it with real MNN, so the ``wrong_rotary`` fault is computed from the faulty export's own graph, never
injected into an answer. The reference is the clean export's graph on ORT CPU fp32.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from doubles.fake_phone import FakePhone, python_wrapper
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export, tiny_prefill
from qnn_debug_testkit.tiny_graph import TinyQwen3Config

CLI = str(Path(sys.executable).parent / "qnn-debug")
SEQ = 16


def _exports(tmp: Path, layers: int, hidden: int, fault_layer: int) -> tuple[Path, Path, Path]:
    """(clean onnx/llm.onnx, wrong_rotary onnx/llm.onnx, prefill .npz) of one tiny Qwen3 size."""
    cfg = TinyQwen3Config(layers=layers, hidden=hidden, intermediate=2 * hidden)
    clean = build_tiny_export(tmp / "clean", TinyExportRequest(config=cfg, onnx_seq_len=SEQ))
    bug = build_tiny_export(tmp / "bug", TinyExportRequest(config=cfg, onnx_seq_len=SEQ, fault="wrong_rotary",
                                                           fault_layer=fault_layer))
    ids = [int(i) for i in np.random.default_rng(layers).integers(0, 256, size=SEQ)]
    np.savez(tmp / "prefill.npz", **tiny_prefill(clean, ids))
    return Path(clean.onnx), Path(bug.onnx), tmp / "prefill.npz"


def _tools(tmp: Path) -> tuple[Path, Path]:
    exe = python_wrapper(tmp / "tools" / "MNN2QNNModel", "fake_mnn2qnn.py")
    sdk = tmp / "sdk"
    (sdk / "bin" / "x86_64-linux-clang").mkdir(parents=True)
    return exe, sdk


def _check(r: dict, layers: int, fault_layer: int, target: str = "device") -> None:
    assert [b["bad"] for b in r["blocks"]] == [i == fault_layer for i in range(layers)], r["blocks"]
    assert r["verdict"] == "real_bug", r["summary"]
    ff = r["first_failing"]
    assert ff is not None and ff["block"] == f"layer {fault_layer}", r["summary"]
    assert ff["op"].startswith(f"/layers.{fault_layer}/self_attn/rotary_q/"), ff
    assert target in ff["method"]
    bad = r["first_failing_block"]["worst"]
    assert bad["excess_db"] > 20 and bad["status"] == "bad"


def test_cli_localises_the_wrong_rotary_on_the_phone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layers, fault_layer = 2, 1
    clean, bug, inputs = _exports(tmp_path, layers, 128, fault_layer)
    phone = FakePhone.install(tmp_path, monkeypatch)
    exe, sdk = _tools(tmp_path)
    out = tmp_path / "blocks"
    res = subprocess.run([CLI, "localise-blocks", str(bug), "--reference-model", str(clean), "--inputs", str(inputs),
                          "--target", "device", "--serial", "FAKE0001", "--option", f"mnn2qnn={exe}",
                          "--option", f"qnn_sdk={sdk}", "--out", str(out), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr + res.stdout
    r = json.loads(res.stdout)
    _check(r, layers, fault_layer)
    assert json.loads((out / "blocks.json").read_text())["first_failing"] == r["first_failing"]
    pushed = [Path(c[3]).name for c in phone.calls() if c[2:3] == ["push"]]
    assert sum(n.endswith("_57_75.mnn") for n in pushed) == layers  # one MNN2QNNModel dump model per block
    assert all(c[:2] == ["-s", "FAKE0001"] for c in phone.calls() if c[0] != "devices")

    from qnn_debug.localise.blocks import BlockRequest, run_blocks

    healthy = run_blocks(BlockRequest(model=clean, inputs=inputs, out=tmp_path / "clean-blocks", target="device",
                                      options={"mnn2qnn": str(exe), "qnn_sdk": str(sdk), "serial": "FAKE0001"}))
    assert healthy.verdict == "ok" and not any(b.bad for b in healthy.blocks), healthy.summary

    build_dir = tmp_path / "mnn-build"  # --target host: a local MNN build (its ModuleBasic is the same double)
    python_wrapper(build_dir / "ModuleBasic.out", "fake_module_basic.py")
    (build_dir / "libMNN.so").write_bytes(b"placeholder")
    host = run_blocks(BlockRequest(model=bug, reference_model=clean, inputs=inputs, out=tmp_path / "host-blocks",
                                   target="host", options={"mnn2qnn": str(exe), "qnn_sdk": str(sdk),
                                                           "mnn_build_dir": str(build_dir)}))
    _check(host.model_dump(mode="json"), layers, fault_layer, target="host")


def test_cli_refuses_an_unknown_target_and_a_serial_off_the_phone(tmp_path: Path) -> None:
    res = subprocess.run([CLI, "localise-blocks", str(tmp_path / "none.onnx"), "--target", "phone", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "unknown target" in res.stdout + res.stderr
    res = subprocess.run([CLI, "localise-blocks", str(tmp_path / "none.onnx"), "--serial", "X1", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "--target device only" in res.stdout + res.stderr


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_localises_the_wrong_rotary_on_the_phone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_mcp_support import connect, error_text, ok

    layers, fault_layer = 3, 0
    clean, bug, inputs = _exports(tmp_path, layers, 64, fault_layer)
    FakePhone.install(tmp_path, monkeypatch)
    exe, sdk = _tools(tmp_path)
    async with connect(tmp_path, "auto") as client:
        args = {"model": str(bug), "reference_model": str(clean), "inputs": str(inputs), "target": "device",
                "serial": "FAKE0001", "options": {"mnn2qnn": str(exe), "qnn_sdk": str(sdk)}, "background": False}
        res = ok(await client.call_tool("localise_blocks", args))
        r = res.get("result", res)
        _check(r, layers, fault_layer)
        stray = await client.call_tool("localise_blocks", {**args, "target": "htp-sim"})
        assert "device or target=host only" in error_text(stray)
