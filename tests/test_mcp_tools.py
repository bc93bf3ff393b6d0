"""Every MCP tool through a real ``mcp.Client``, under the current and the legacy handshake."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import MCPError

from test_mcp_support import MODES, connect, error_text, ok, write_small_cnn

pytestmark = pytest.mark.anyio

TOOLS = {
    "baseline", "dump_qnn", "compare", "diagnose", "run_on_device", "toggle_shapeMutable", "lookup_op_constraints",
    "triage_log", "list_devices", "probe_device", "job_status", "job_result", "job_cancel",
    "bisect", "check_llm_export", "compare_llm_text", "localise_blocks", "fix_and_prove", "compare_targets",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_listed_with_schemas_and_true_annotations(tmp_path: Path, mode: str) -> None:
    async with connect(tmp_path, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 80 and "\n " not in tool.description, tool.name
        assert tool.output_schema is not None, tool.name
        assert "ctx" not in tool.input_schema.get("properties", {}) and "roots" not in tool.input_schema.get("properties", {})
        a = tool.annotations
        assert a is not None and a.read_only_hint is not None and a.open_world_hint is not None, tool.name
    for name in ("triage_log", "lookup_op_constraints", "list_devices", "probe_device", "job_status", "job_result",
                 "check_llm_export"):
        assert tools[name].annotations.read_only_hint is True, name  # type: ignore[union-attr]
    for name in ("baseline", "dump_qnn", "diagnose", "run_on_device", "toggle_shapeMutable", "job_cancel"):
        assert tools[name].annotations.read_only_hint is False, name  # type: ignore[union-attr]
    for name in ("list_devices", "probe_device", "run_on_device", "dump_qnn", "diagnose"):
        assert tools[name].annotations.open_world_hint is True, name  # type: ignore[union-attr]
    assert tools["toggle_shapeMutable"].annotations.idempotent_hint is True  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_baseline_dump_compare_workflow_on_the_real_engine(tmp_path: Path, mode: str) -> None:
    model = write_small_cnn(tmp_path)
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async with connect(tmp_path, mode) as client:
        base = ok(await client.call_tool("baseline", {"model": model.name, "background": False},
                                         progress_callback=on_progress))
        assert base["status"] == "succeeded" and base["job_id"] is None
        assert base["result"]["report"]["trusted"] is True and base["result"]["out"].startswith(str(tmp_path))
        baseline_dir = Path(base["result"]["out"]).relative_to(tmp_path)
        inputs = Path(base["result"]["inputs_path"]).relative_to(tmp_path)
        dump = ok(await client.call_tool("dump_qnn", {"model": model.name, "inputs": str(inputs), "background": False}))
        run_dir = tmp_path / "qnn-debug-runs" / "small_cnn" / "htp-sim-fp16"
        assert dump["result"]["out"] == str(run_dir) and dump["result"]["tensors"] >= 4
        compared = ok(await client.call_tool("compare", {"reference": str(baseline_dir), "target": str(run_dir),
                                                         "top": 2}))
        report = await client.read_resource(compared["report_uri"])
    result = compared["result"]
    assert result["verdict"]["kind"] == "ok" and result["first_failing"] is None
    assert len(result["tensors"]) == 2 and result["tensors_total"] >= 4  # top rows only; the rest is in the report
    assert "verdict" in report.contents[0].text.lower()  # type: ignore[union-attr]
    assert any("ort-cpu" in m for m in seen), seen


@pytest.mark.parametrize("mode", MODES)
async def test_background_job_is_followed_to_its_result(tmp_path: Path, mode: str) -> None:
    write_small_cnn(tmp_path)
    async with connect(tmp_path, mode) as client:
        started = ok(await client.call_tool("baseline", {"model": "small_cnn.onnx", "background": True,
                                                         "mnn_gate": False}))
        assert started["status"] in ("queued", "running") and started["result"] is None
        job_id = started["job_id"]
        status = ok(await client.call_tool("job_status", {"job_id": job_id}))
        assert status["job_id"] == job_id and status["tool"] == "baseline"
        outcome = ok(await client.call_tool("job_result", {"job_id": job_id, "wait_s": 60}))
        assert outcome["state"] == "succeeded", outcome
        assert outcome["result"]["report"]["gate"]["status"] != "passed"  # the gate was switched off
        final = ok(await client.call_tool("job_status", {"job_id": job_id}))
        assert final["state"] == "succeeded" and final["progress_events"] > 0
        cancelled = ok(await client.call_tool("job_cancel", {"job_id": job_id}))
        assert cancelled["state"] == "succeeded"  # finished jobs stay as they were


@pytest.mark.parametrize("mode", MODES)
async def test_automatic_job_answers_small_models_in_one_call(tmp_path: Path, mode: str) -> None:
    write_small_cnn(tmp_path)
    async with connect(tmp_path, mode) as client:
        first = ok(await client.call_tool("baseline", {"model": "small_cnn.onnx", "mnn_gate": False}))
        second = ok(await client.call_tool("baseline", {"model": "small_cnn.onnx", "mnn_gate": False}))
    assert first["status"] == "succeeded" and first["job_id"]
    assert first["result"]["out"] != second["result"]["out"]  # a second run never overwrites the first


@pytest.mark.parametrize("mode", MODES)
async def test_engine_errors_come_back_as_tool_errors_with_a_next_step(tmp_path: Path, mode: str) -> None:
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    async with connect(tmp_path, mode) as client:
        inline = error_text(await client.call_tool("baseline", {"model": "broken.onnx", "background": False}))
        in_job = error_text(await client.call_tool("baseline", {"model": "broken.onnx"}))
        unknown = error_text(await client.call_tool("job_result", {"job_id": "0123456789ab"}))
    assert "not a readable ONNX model" in inline and "Next step" in inline
    assert "not a readable ONNX model" in in_job and "job" in in_job
    assert "no job with id" in unknown


@pytest.mark.parametrize("mode", MODES)
async def test_diagnose_runs_everything_in_one_call(tmp_path: Path, mode: str) -> None:
    write_small_cnn(tmp_path)
    async with connect(tmp_path, mode) as client:
        answer = ok(await client.call_tool("diagnose", {"model": "small_cnn.onnx", "mnn_gate": False, "top": 3}))
    assert answer["status"] == "succeeded" and answer["job_id"]
    result = answer["result"]
    assert result["compare"]["verdict"]["kind"] == "ok" and len(result["compare"]["tensors"]) <= 3
    # the gate was switched off: the summary says first that the reference is not verified, then the verdict
    assert answer["report_uri"] and answer["summary"].startswith("Reference not verified: the MNN CPU gate was not run")
    assert "(verdict ok, confidence" in answer["summary"]


@pytest.mark.parametrize("mode", MODES)
async def test_triage_log_reads_text_and_files(tmp_path: Path, mode: str, mnn_fixtures: Path) -> None:
    log = (mnn_fixtures / "logs" / "modulebasic_fwd5_p2_mutable_true.log").read_text()
    (tmp_path / "run.log").write_text(log)
    async with connect(tmp_path, mode) as client:
        by_text = ok(await client.call_tool("triage_log", {"log_text": log}))
        by_path = ok(await client.call_tool("triage_log", {"log_path": "run.log"}))
        neither = error_text(await client.call_tool("triage_log", {}))
        empty = error_text(await client.call_tool("triage_log", {"log_text": ""}))
    assert by_text["category"] == by_path["category"] and by_text["evidence"]
    assert by_text["playbook_uri"].startswith("playbook://")
    assert any(step["tool"] for step in by_text["next_steps"])
    assert "exactly one" in neither and "empty" in empty


@pytest.mark.parametrize("mode", MODES)
async def test_lookup_op_constraints_from_tables(tmp_path: Path, mode: str) -> None:
    async with connect(tmp_path, mode) as client:
        by_name = ok(await client.call_tool("lookup_op_constraints", {"op": "Convolution"}))
        by_number = ok(await client.call_tool("lookup_op_constraints", {"op": "17"}))
        unknown = error_text(await client.call_tool("lookup_op_constraints", {"op": "NoSuchOp"}))
        option_like = error_text(await client.call_tool("lookup_op_constraints", {"op": "--sdk=/etc", "probe": True}))
    assert "pattern" in option_like  # never reaches the engine's command line as an option
    assert "mnn" in by_name["kinds"] and by_name["facts"] and by_name["probe"] is None
    assert by_number["mnn"][0]["number"] == 17
    assert "unknown op" in unknown and "Next step" in unknown


async def test_lookup_op_constraints_probes_the_simulator(tmp_path: Path) -> None:
    async with connect(tmp_path, "auto") as client:
        probed = ok(await client.call_tool("lookup_op_constraints", {"op": "Conv", "probe": True,
                                                                     "shapes": ["1x3x8x8", "4x3x3x3"]}))
        bad = error_text(await client.call_tool("lookup_op_constraints", {"op": "Conv", "shapes": ["1x3;rm -rf /"]}))
    assert probed["probe"]["accepted"] is True and probed["probe"]["soc_model"] == 69
    assert "shapes" in bad


@pytest.mark.parametrize("mode", MODES)
async def test_toggle_shape_mutable_edits_a_copy_of_a_real_test_dir(tmp_path: Path, mode: str, mnn_fixtures: Path) -> None:
    import json
    import shutil

    shutil.copytree(mnn_fixtures / "testdir", tmp_path / "testdir")
    async with connect(tmp_path, mode) as client:
        first = ok(await client.call_tool("toggle_shapeMutable", {"test_dir": "testdir", "value": False}))
        again = ok(await client.call_tool("toggle_shapeMutable", {"test_dir": "testdir", "value": False}))
        missing_value = error_text(await client.call_tool("toggle_shapeMutable", {"test_dir": "testdir"}))
    assert (first["old"], first["new"], first["changed"]) == (None, False, True) and Path(first["backup"]).is_file()
    assert again["changed"] is False
    assert json.loads((tmp_path / "testdir" / "input.json").read_text())["shapeMutable"] is False
    assert "value" in missing_value


@pytest.mark.parametrize("mode", MODES)
async def test_playbooks_are_resources_and_prompts_are_listed(tmp_path: Path, mode: str) -> None:
    async with connect(tmp_path, mode) as client:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        readme = await client.read_resource("playbook://README")
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        prompt = await client.get_prompt("triage_qnn_error", {"log": "error code 1002"})
        with pytest.raises(MCPError, match="no playbook named"):
            await client.read_resource("playbook://no-such-playbook")
    assert {"playbook://README", "playbook://error-codes"} <= uris and "playbook://{name}" in templates
    assert "Playbooks" in readme.contents[0].text  # type: ignore[union-attr]
    assert prompts == {"find_first_failing_op", "triage_qnn_error"}
    text = prompt.messages[0].content.text  # type: ignore[union-attr]
    assert "triage_log" in text and "low_confidence" in text and "playbook://triage-labels" in text
