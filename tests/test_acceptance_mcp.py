"""Acceptance findings on the MCP face, through a real ``mcp.Client`` and the real engine:

- every optional path argument says what it is for (not just "omit for the default");
- an unsupported-op failure carries QNN's own reasons in the error text (the engine's hint points at
  ``details.reasons``, which a model never saw);
- ``job_result`` answers with the tool's summary (the verdict), not only "succeeded";
- ``job_status`` shows where each stage got to instead of ten ticks of one stage;
- ``baseline`` takes an MNN test dir as its inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_debug.examples import single_op_model
from qnn_debug.mnn.testdir_builder import write_testdir
from test_mcp_support import connect, error_text, ok, write_small_cnn

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_optional_path_arguments_say_what_they_are_for(tmp_path: Path) -> None:
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, tool in tools.items():
        for arg, schema in tool.input_schema.get("properties", {}).items():
            description = schema.get("description") or ""
            assert description.strip(), (name, arg)
            assert "omit for the default" not in description, (name, arg, description)
    assert "log file" in tools["triage_log"].input_schema["properties"]["log_path"]["description"]
    assert ".mnn" in tools["compare"].input_schema["properties"]["mnn_model"]["description"]


async def test_unsupported_op_error_quotes_qnn_reasons(tmp_path: Path) -> None:
    onnx.save(single_op_model("Acos", [1, 8], name="acos_node"), str(tmp_path / "acos.onnx"))
    async with connect(tmp_path, "auto") as client:
        inline = error_text(await client.call_tool("dump_qnn", {"model": "acos.onnx", "background": False}))
        in_job = error_text(await client.call_tool("dump_qnn", {"model": "acos.onnx"}))
    for text in (inline, in_job):
        assert "CPU fallback is forbidden" in text
        assert "QNN's own words" in text and "Operators of type" in text and "Acos" in text


async def test_job_result_and_status_are_informative(tmp_path: Path) -> None:
    write_small_cnn(tmp_path)
    async with connect(tmp_path, "auto") as client:
        started = ok(await client.call_tool("diagnose", {"model": "small_cnn.onnx", "mnn_gate": False,
                                                         "background": True}))
        job_id = started["job_id"]
        result = await client.call_tool("job_result", {"job_id": job_id, "wait_s": 100})
        status = ok(await client.call_tool("job_status", {"job_id": job_id}))
    assert ok(result)["state"] == "succeeded"
    first_text = getattr(result.content[0], "text", "")
    # The gate was switched off, so the answer opens with that distrust, then names the verdict.
    assert "succeeded: Reference not verified" in first_text, first_text
    assert "(verdict ok, confidence" in first_text, first_text
    stages = [p["stage"] for p in status["recent_progress"]]
    assert stages and len(stages) == len(set(stages)), stages  # one line per stage, the latest of each
    assert status["progress_events"] > len(stages)


async def test_baseline_takes_a_test_dir_as_inputs(tmp_path: Path) -> None:
    model = write_small_cnn(tmp_path)
    spec = onnx.load(str(model)).graph.input[0]
    shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).random(shape).astype(np.float32)
    write_testdir(tmp_path / "td", {spec.name: x}, [], shape_mutable=False)
    async with connect(tmp_path, "auto") as client:
        base = ok(await client.call_tool("baseline", {"model": model.name, "inputs": "td", "mnn_gate": False,
                                                      "background": False}))
    assert base["result"]["report"]["inputs"]["source"] == "testdir:td"
    np.testing.assert_allclose(np.load(Path(base["result"]["inputs_path"]))[spec.name], x, rtol=1e-6)


async def test_playbook_resources_link_to_resources(tmp_path: Path) -> None:
    # a client that reads playbook://error-codes has no folder to resolve "shape-mutable.md" in
    async with connect(tmp_path, "auto") as client:
        text = (await client.read_resource("playbook://error-codes")).contents[0].text  # type: ignore[union-attr]
    assert "](playbook://README)" in text and "](playbook://shape-mutable)" in text
    assert "](playbook://performance#vtcm-and-memory)" in text
    assert ".md)" not in text and ".md#" not in text
