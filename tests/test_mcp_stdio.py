"""The real console entry point over stdio: protocol bytes only on stdout, with and without buffering.

``import MNN`` and the QNN execution provider write to fd 1; one stray line can make a host drop the
connection. The server must keep them off stdout whatever ``PYTHONUNBUFFERED`` says, so we speak raw
JSON-RPC to the real process, make it run MNN (the baseline's MNN-CPU gate), and parse every byte
it wrote. Further tests drive the same entry point with the SDK's client in the current protocol era
and over streamable HTTP (``--http``, bound to 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from test_mcp_support import json_lines, ok, stdio_params, write_small_cnn

LEGACY = "2025-11-25"


class RawStdio:
    """A minimal JSON-RPC peer over a child's stdin/stdout that keeps every byte it reads."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, cwd=cwd)
        assert self.proc.stdout is not None
        self.raw = bytearray()
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self._next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self._lines(deadline - time.monotonic()):
                msg = json.loads(line)
                if msg.get("id") == self._next_id:
                    return msg
        raise AssertionError(f"no answer to {method} within {timeout} s; stdout so far: {bytes(self.raw)[-2000:]!r}")

    def _lines(self, timeout: float) -> list[bytes]:
        assert self.proc.stdout is not None
        if not self._sel.select(timeout=max(0.0, timeout)):
            return []
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            raise AssertionError(f"server closed stdout; stderr: {self.proc.stderr.read()[-2000:]!r}")  # type: ignore[union-attr]
        self.raw += chunk
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return [ln for ln in lines if ln.strip()]

    def close(self, timeout: float = 20) -> bytes:
        """Close stdin (how hosts stop a server), wait for exit and return everything written to stdout."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._sel.select(timeout=deadline - time.monotonic()):
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                break
            self.raw += chunk
        self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        return bytes(self.raw)


@pytest.mark.parametrize("unbuffered", [True, False], ids=["PYTHONUNBUFFERED=1", "buffered"])
def test_stdout_carries_only_json_rpc_while_mnn_runs(tmp_path: Path, unbuffered: bool) -> None:
    write_small_cnn(tmp_path)
    params = stdio_params(tmp_path, unbuffered=unbuffered)
    peer = RawStdio([params.command, *params.args], params.env or {}, tmp_path)
    try:
        init = peer.request("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                           "clientInfo": {"name": "raw-test", "version": "0"}})
        assert init["result"]["serverInfo"]["name"] == "mnn-qnn-debug"
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = peer.request("tools/list", {})
        assert {t["name"] for t in listed["result"]["tools"]} >= {"baseline", "compare", "triage_log"}
        called = peer.request("tools/call", {"name": "baseline",
                                             "arguments": {"model": "small_cnn.onnx", "background": False}})
        assert called["result"]["isError"] is False, called
        assert called["result"]["structuredContent"]["result"]["report"]["gate"]["status"] == "passed"
        bad = peer.request("tools/call", {"name": "baseline", "arguments": {"model": "../outside.onnx"}})
        assert bad["result"]["isError"] is True
        triaged = peer.request("tools/call", {"name": "triage_log", "arguments": {"log_text": "error code 1002"}})
        assert triaged["result"]["isError"] is False  # in-process engine code: still nothing on stdout
    finally:
        raw = peer.close()
    assert peer.proc.returncode == 0
    messages = json_lines(raw)  # raises on any non-JSON line, e.g. MNN's "The device supports: ..."
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    assert b"device supports" not in raw


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_current_protocol_era_over_stdio(tmp_path: Path) -> None:
    write_small_cnn(tmp_path)
    async with Client(stdio_params(tmp_path), mode="auto") as client:
        assert client.protocol_version != LEGACY
        assert len((await client.list_tools()).tools) >= 5
        assert (await client.call_tool("job_status", {"job_id": "missing"})).is_error
        answer = ok(await client.call_tool("baseline", {"model": "small_cnn.onnx", "mnn_gate": False}))
    assert answer["status"] == "succeeded" and answer["result"]["report"]["reference"] == "ort-cpu"


def test_bad_root_fails_cleanly_before_serving(tmp_path: Path) -> None:
    ran = subprocess.run([sys.executable, "-m", "qnn_debug_mcp", "--root", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and "not a directory" in ran.stderr and ran.stdout == ""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.anyio
async def test_streamable_http_binds_to_localhost(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "qnn_debug_mcp", "--http", "--port", str(port), "--root", str(tmp_path),
                             "--token", "test-token"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        listening = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and f":{port:04X} " not in listening:
            listening = Path("/proc/net/tcp").read_text()
            await anyio.sleep(0.2)
        assert f"0100007F:{port:04X} " in listening, "not listening on 127.0.0.1"  # 127.0.0.1 only, not 0.0.0.0
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers={"Authorization": "Bearer test-token"})
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client:
            answer = ok(await client.call_tool("triage_log", {"log_text": "error code 6000"}))
        assert answer["category"]
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_starting_the_server_imports_no_heavy_library() -> None:
    """tools/list must answer fast: numpy, onnx, onnxruntime, MNN and matplotlib load only inside tools."""
    probe = ("import sys; from qnn_debug_mcp.app import build_server; build_server(); "
             "print(','.join(m for m in ('numpy', 'onnx', 'onnxruntime', 'MNN', 'matplotlib') if m in sys.modules))")
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == ""
