"""The MCP tools are the engine's typed operations: schemas from the request/result models, errors by class.

Through a real ``mcp.Client`` against the real server; the operations run in real worker processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import onnx
import pytest

from qnn_debug.api import operation
from qnn_debug.api.fields import ServerSet, marker
from qnn_debug.examples import deep_conv_net, single_op_model
from test_mcp_support import connect, ok

pytestmark = pytest.mark.anyio

# tool -> (operation, extra arguments the face adds)
LONG = {"background"}
TOOL_OPERATIONS: dict[str, tuple[str, set[str]]] = {
    "triage_log": ("triage", set()),
    "lookup_op_constraints": ("op_lookup", set()),
    "toggle_shapeMutable": ("toggle_shape_mutable", set()),
    "baseline": ("baseline", LONG),
    "dump_qnn": ("dump", LONG),
    "compare": ("compare", LONG | {"top"}),
    "diagnose": ("diagnose", LONG | {"top"}),
    "bisect": ("bisect", LONG),
    "localise_blocks": ("localise_blocks", LONG),
    "list_devices": ("devices", set()),
    "probe_device": ("probe_device", set()),
    "run_on_device": ("run", LONG),
    "check_llm_export": ("llm_check", set()),
    "compare_llm_text": ("llm_text", LONG),
    "fix_and_prove": ("fix", LONG),
    "compare_targets": ("compare_targets", LONG),
}
JOB_TOOLS = {"job_status", "job_result", "job_cancel"}
LONG_RESULT_FIELDS = {"compare": {"first_failing", "verdict", "tensors"}, "diagnose": {"compare", "baseline_trusted"},
                      "baseline": {"out", "report"}}


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
    assert set(tools) == set(TOOL_OPERATIONS) | JOB_TOOLS
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


async def test_job_result_publishes_every_long_result_model(tmp_path: Path) -> None:
    """job_result serves every long tool, so its `result` is one of their result models, each described."""
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    out = tools["job_result"].output_schema
    assert out is not None
    options = out["properties"]["result"]["anyOf"]
    published = {o["$ref"].rsplit("/", 1)[1] for o in options if "$ref" in o}
    long_results = {operation(op_name).result for op_name, _ in TOOL_OPERATIONS.values() if operation(op_name).long}
    assert {m.__name__ for m in long_results} <= published
    for model in long_results:
        described = out["$defs"][model.__name__]
        assert set(model.model_json_schema().get("properties", {})) <= set(described["properties"]), model.__name__


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


async def test_unsupported_nodes_reach_the_client_as_their_class_inline_and_from_a_job(tmp_path: Path) -> None:
    onnx.save(single_op_model("Acos", [1, 8], name="acos_node"), str(tmp_path / "acos.onnx"))
    async with connect(tmp_path, "auto") as client:
        inline = await client.call_tool("dump_qnn", {"model": "acos.onnx", "background": False})
        in_job = await client.call_tool("dump_qnn", {"model": "acos.onnx"})  # a job that finishes while we wait
    for result in (inline, in_job):
        text = " ".join(getattr(c, "text", "") for c in result.content)
        error = (result.structured_content or {}).get("error") or {}
        assert result.is_error and text.startswith("UnsupportedOnTargetError: "), text
        assert error["type"] == "UnsupportedOnTargetError" and error["kind"] == "unsupported_nodes"
        assert error["hint"] and f"Next step: {error['hint'].rstrip('.')}" in text
        assert "QNN's own words" in text and error["details"]["reasons"]
    assert "failed (job " in " ".join(getattr(c, "text", "") for c in in_job.content)


def engine_processes(marker_path: Path) -> list[int]:
    """Pids whose environment confines them to ``marker_path`` (the engine children of one test's server)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        roots = [e for e in env if e.startswith(b"QNN_DEBUG_ROOTS=")]
        if state != "Z" and roots and str(marker_path).encode() in roots[0]:
            found.append(int(name))
    return found


async def test_a_cancelled_long_call_leaves_no_process_alive(tmp_path: Path) -> None:
    onnx.save(deep_conv_net(), str(tmp_path / "deep.onnx"))
    async with connect(tmp_path, "auto") as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.call_tool("baseline", {"model": "deep.onnx", "background": False}))
            with anyio.fail_after(60):
                while not engine_processes(tmp_path):
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # let the engine start its own workers too
            started = engine_processes(tmp_path)
            tg.cancel_scope.cancel()
        with anyio.fail_after(20):
            while engine_processes(tmp_path):
                await anyio.sleep(0.1)
        assert started
        assert ok(await client.call_tool("lookup_op_constraints", {"op": "Conv"}))["query"] == "Conv"


async def test_a_path_the_server_refuses_is_bad_input_like_the_engines(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.log").write_text("graph finalize failed 1002\n")
    async with connect(root, "auto") as client:
        result = await client.call_tool("triage_log", {"log_path": str(tmp_path / "outside.log")})
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error and text.startswith("BadInputError: log_path "), text
    assert "outside the workspace" in text and "Next step: " in text
    assert (result.structured_content or {})["error"]["kind"] == "bad_input"
