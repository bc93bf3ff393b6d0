"""The parallel engine's options over MCP: ``localise_blocks``, ``diagnose`` and ``bisect`` take ``workers`` and
``cluster`` as the CLI does, and a malformed cluster address is refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_mcp_support import connect, error_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("tool", ["localise_blocks", "diagnose"])
async def test_the_tool_takes_workers_and_a_cluster_address(tmp_path: Path, tool: str) -> None:
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        props = tools[tool].input_schema["properties"]
        assert "cluster" in props and "workers" in props
        assert "Ray" in str(props["cluster"]) and "every core" in str(props["workers"])
        (tmp_path / "m.onnx").write_bytes(b"")
        bad = await client.call_tool(tool, {"model": "m.onnx", "cluster": "head node; rm -rf", "background": False})
        assert bad.is_error and "cluster" in error_text(bad)


async def test_bisect_takes_workers_and_a_cluster_address(tmp_path: Path) -> None:
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        props = tools["bisect"].input_schema["properties"]
        assert "Ray" in str(props["cluster"]) and "probes at once" in str(props["workers"])
        (tmp_path / "m.onnx").write_bytes(b"")
        bad = await client.call_tool("bisect", {"model": "m.onnx", "cluster": "head node; rm -rf", "background": False})
        assert bad.is_error and "cluster" in error_text(bad)


def test_a_cluster_that_does_not_answer_is_a_typed_error_at_once(tmp_path: Path) -> None:
    import socket
    import time

    from qnn_debug.errors import TargetError
    from qnn_debug.parallel.ray_engine import connect

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(TargetError, match=r"no Ray cluster answers at 127\.0\.0\.1:") as e:
        connect(f"127.0.0.1:{port}", 1, 0)
    assert time.monotonic() - t0 < 10 and "ray start --head" in (e.value.hint or "")
