"""The real server over streamable HTTP on 127.0.0.1 (loopback only, bounded): bearer token, Host/Origin checks,
client roots bounded by --root, session-owned jobs and reports, executables only from operator folders."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import ListRootsResult, Root

import hostile
from test_mcp_support import error_text, ok, write_small_cnn

TOKEN = "t0ken-for-tests"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


TOKEN_B = "another-client's-token"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    write_small_cnn(root, "cnn.onnx")
    write_small_cnn(outside, "secret.onnx")
    (outside / "build").mkdir()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "qnn_debug_mcp", "--http", "--port", str(port), "--root", str(root),
                             "--token", TOKEN, "--token", TOKEN_B, "--background-wait", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp", root, outside
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


@asynccontextmanager
async def session(url: str, *, roots: list[str] | None = None, token: str = TOKEN,
                  sessionless: bool = False) -> AsyncIterator[Client]:
    async def list_roots(_: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=u) for u in roots or []])  # type: ignore[arg-type]

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    mode: Any = "auto" if sessionless else "legacy"
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode,
                            list_roots_callback=list_roots if roots is not None else None) as client:
        yield client


def _post(url: str, headers: dict[str, str], body: str | None = None) -> tuple[int, str]:
    import httpx2

    init = body or json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    r = httpx2.post(url, content=init, headers={**base, **headers}, timeout=20)
    return r.status_code, r.text


async def test_the_door_is_locked(http_server: tuple[str, Path, Path]) -> None:
    url, _, _ = http_server
    port = url.split(":")[2].split("/")[0]
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert _post(url, {})[0] == 401
    assert _post(url, {"Authorization": "Bearer wrong"})[0] == 401
    assert _post(url, {"Authorization": TOKEN})[0] == 401
    assert _post(url, {**good, "Host": f"evil.example:{port}"})[0] == 421  # DNS rebinding
    assert _post(url, {**good, "Origin": "http://evil.example"})[0] == 403
    assert _post(url, {**good, "Origin": f"http://localhost:{port}"})[0] == 200
    assert _post(url, good)[0] == 200
    status, text = _post(url, good, '{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[1]}')
    assert status >= 400 or '"error"' in text  # malformed JSON-RPC over HTTP is answered, never left hanging


async def test_client_roots_narrow_never_widen(http_server: tuple[str, Path, Path]) -> None:
    url, root, outside = http_server
    before = hostile.snapshot(outside)
    async with session(url, roots=["file:///"]) as client:
        text = error_text(await client.call_tool("baseline", {"model": str(outside / "secret.onnx"), "background": False}))
        assert "outside the workspace" in text
        answer = ok(await client.call_tool("baseline", {"model": "cnn.onnx", "mnn_gate": False, "background": False}))
        assert Path(answer["result"]["out"]).is_relative_to(root)
    async with session(url, roots=[outside.as_uri()]) as client:
        text = error_text(await client.call_tool("baseline", {"model": str(outside / "secret.onnx")}))
        assert "none of the client's workspace roots" in text
    assert hostile.snapshot(outside) == before


async def test_executables_only_from_operator_folders(http_server: tuple[str, Path, Path]) -> None:
    url, root, _ = http_server
    (root / "build").mkdir()
    (root / "build" / "ModuleBasic.out").write_text("#!/bin/sh\ntouch pwned\n")
    async with session(url) as client:
        for key in ("mnn_build_dir", "qnn_lib_dir"):
            text = error_text(await client.call_tool("run_on_device", {
                "model": "cnn.onnx", "target": "host", "options": {key: "build"}, "background": False}))
            assert "only runs from folders its operator configured" in text and "--exec-root" in text
    assert not list(root.rglob("pwned"))


async def test_jobs_and_reports_belong_to_their_session(http_server: tuple[str, Path, Path]) -> None:
    url, _, _ = http_server
    async with session(url) as alice, session(url) as mallory:
        started = ok(await alice.call_tool("baseline", {"model": "cnn.onnx", "mnn_gate": False, "background": True}))
        job = started["job_id"]
        assert len(job) >= 24
        for tool in ("job_status", "job_result", "job_cancel"):
            text = error_text(await mallory.call_tool(tool, {"job_id": job}))
            assert job not in text.split("no job with id")[-1].split(")")[-1] and "in this session" in text
        mine = error_text(await mallory.call_tool("job_status", {"job_id": "0" * 24}))
        assert job not in mine
        with anyio.fail_after(120):
            done = ok(await alice.call_tool("job_result", {"job_id": job, "wait_s": 100}))
        assert done["state"] == "succeeded"
        base = done["result"]["out"]
        compared = ok(await alice.call_tool("compare", {"reference": base, "target": f"{base}/reference",
                                                        "local_checks": False, "background": False}))
        uri = compared["report_uri"]
        assert uri and (await alice.read_resource(uri)).contents
        from mcp.shared.exceptions import MCPError

        with pytest.raises(MCPError, match="no report"):
            await mallory.read_resource(uri)
        listed = {str(r.uri) for r in (await mallory.list_resources()).resources}
        assert uri not in listed


async def test_sessionless_clients_are_kept_apart_by_their_token(http_server: tuple[str, Path, Path]) -> None:
    """Without sessions the bearer token is the identity: another token's client cannot follow, cancel or list
    a job; a second connection with the same token is the same client and can."""
    url, _, _ = http_server
    async with session(url, sessionless=True) as alice, session(url, sessionless=True, token=TOKEN_B) as bob:
        job = ok(await alice.call_tool("lookup_op_constraints", {"op": "Conv"}))["query"]
        assert job == "Conv"
        started = ok(await alice.call_tool("baseline", {"model": "cnn.onnx", "mnn_gate": False, "background": True}))
        job_id = started["job_id"]
        for tool in ("job_status", "job_result", "job_cancel"):
            text = error_text(await bob.call_tool(tool, {"job_id": job_id}))
            assert "no job with id" in text and "Next step" in text
        async with session(url, sessionless=True) as alice_again:
            with anyio.fail_after(120):
                done = ok(await alice_again.call_tool("job_result", {"job_id": job_id, "wait_s": 100}))
        assert done["state"] == "succeeded"
        assert ok(await bob.call_tool("lookup_op_constraints", {"op": "Relu"}))["query"] == "Relu"


async def test_text_that_is_not_unicode_gets_an_error_under_its_id(http_server: tuple[str, Path, Path]) -> None:
    """Raw bytes that are not UTF-8 and escaped lone surrogates: an error naming the request's id, then more service."""
    import httpx2

    from test_hostile_mcp import NOT_UNICODE

    url, _root, _outside = http_server
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    init = httpx2.post(url, headers=headers, timeout=20, content=json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}))
    assert init.status_code == 200, init.text
    headers |= {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    for i, (template, code) in enumerate(NOT_UNICODE, start=300):
        r = httpx2.post(url, headers=headers, content=template % i, timeout=20)
        reply = json.loads(r.text)
        assert r.status_code == 400 and reply["id"] == i and reply["error"]["code"] == code, r.text
        assert "UTF-8" in reply["error"]["message"]
    async with session(url) as client:
        with anyio.fail_after(60):
            ok(await client.call_tool("lookup_op_constraints", {"op": "Conv"}))
