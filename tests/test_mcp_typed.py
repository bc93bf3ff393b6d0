"""The MCP tools are the engine's typed operations: schemas from the request/result models, errors by class.

Through a real ``mcp.Client`` against the real server; the operations run in real worker processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qnn_debug.api import operation
from qnn_debug.api.fields import ServerSet, marker
from test_mcp_support import connect

pytestmark = pytest.mark.anyio

# tool -> (operation, extra arguments the face adds)
TOOL_OPERATIONS: dict[str, tuple[str, set[str]]] = {
    "triage_log": ("triage", set()),
    "lookup_op_constraints": ("op_lookup", set()),
}
LONG_RESULT_FIELDS = {"compare": {"first_failing", "verdict"}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with a local ``$ref`` (possibly inside ``anyOf`` with null) followed."""
    for option in node.get("anyOf", [node]):
        ref = option.get("$ref")
        if ref:
            return dict(schema["$defs"][ref.rsplit("/", 1)[1]])
        if option.get("type") == "object":
            return option
    return node


async def test_input_schema_is_the_request_model_and_output_schema_the_result(tmp_path: Path) -> None:
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, (op_name, extra) in TOOL_OPERATIONS.items():
        op = operation(op_name)
        fields = {n for n, f in op.request.model_fields.items() if marker(f, ServerSet) is None}
        assert set(tools[name].input_schema["properties"]) == fields | extra, name
        for field in fields:
            want = op.request.model_fields[field].description
            assert tools[name].input_schema["properties"][field].get("description") == want, (name, field)
        out = tools[name].output_schema
        assert out is not None, name
        result_props = set(op.result.model_json_schema().get("properties", {}))
        if op.long:
            assert {"status", "job_id", "result"} <= set(out["properties"]), name
            described = resolve(out, out["properties"]["result"])
            assert result_props <= set(described.get("properties", {})), name
            assert LONG_RESULT_FIELDS.get(name, set()) <= set(described["properties"]), name
        else:
            assert result_props <= set(out["properties"]), name


async def test_an_engine_error_raised_in_the_worker_keeps_its_class_and_hint(tmp_path: Path) -> None:
    async with connect(tmp_path, "auto") as client:
        result = await client.call_tool("triage_log", {})  # neither log_text nor log_path: the runner refuses
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error
    assert text.startswith("BadInputError: pass exactly one of log_text or log_path"), text
    assert "Next step: paste the log as log_text, or give log_path" in text
    error = (result.structured_content or {})["error"]
    assert error["type"] == "BadInputError" and error["kind"] == "bad_input"
    assert error["hint"] == "paste the log as log_text, or give log_path"


async def test_server_set_fields_are_not_arguments(tmp_path: Path) -> None:
    """A field the server fills from its configuration cannot be passed by a client."""
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, (op_name, _) in TOOL_OPERATIONS.items():
        hidden = {n for n, f in operation(op_name).request.model_fields.items() if marker(f, ServerSet) is not None}
        assert not hidden & set(tools[name].input_schema["properties"]), name
