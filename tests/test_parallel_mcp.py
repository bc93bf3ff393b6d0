"""The parallel engine's options over MCP: ``localise_blocks`` takes ``workers`` and ``cluster`` as the CLI does,
and a malformed cluster address is refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_mcp_support import connect, error_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_localise_blocks_takes_workers_and_a_cluster_address(tmp_path: Path) -> None:
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        props = tools["localise_blocks"].input_schema["properties"]
        assert "cluster" in props and "workers" in props
        assert "Ray" in str(props["cluster"]) and "every core" in str(props["workers"])
        (tmp_path / "m.onnx").write_bytes(b"")
        bad = await client.call_tool("localise_blocks", {"model": "m.onnx", "cluster": "head node; rm -rf",
                                                         "background": False})
        assert bad.is_error and "cluster" in error_text(bad)
