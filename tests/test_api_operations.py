"""The typed operations (``qnn_debug.api``): every request and result round-trips JSON, a bad field is a
typed error naming it, the models load without the heavy libraries, and real runs answer through ``execute``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from pydantic import BaseModel

from qnn_debug.api import OPERATIONS, execute, operation
from qnn_debug.api.fields import PathRole, ServerSet, marker, path_fields
from qnn_debug.api.options import TargetOptions, engine_options, parse_option_pairs
from qnn_debug.errors import BadInputError
from qnn_debug.examples import small_cnn

# One small valid request per operation: a new operation must add its own here.
EXAMPLES: dict[str, dict[str, Any]] = {
    "triage": {"log_text": "QnnDsp <E> Failed to finalize graph (id: 1) with err 1002"},
    "op_lookup": {"op": "Conv", "attrs": {"kernel_shape": "3,3"}, "shapes": ["1x3x8x8"]},
    "baseline": {"model": "m.onnx", "shapes": {"x": [1, 3, 32, 32]}, "mnn_gate": False},
    "dump": {"model": "m.mnn", "target": "device", "serial": "R58M123", "options": {"mode": "offline", "loops": 2}},
    "compare": {"reference": "base", "target": "run", "local_checks": False, "fp16_codes": "ieee"},
    "compare_targets": {"baseline": "base", "target_a": "d/host", "target_b": "d/htp-sim", "label_a": "MNN"},
    "diagnose": {"model": "m.onnx", "precision": "quantized", "soc": 57, "arch": 75},
    "bisect": {"model": "m.onnx", "baseline": "base", "opencl": True},
    "localise_blocks": {"model": "llm.onnx", "layers_per_block": 2, "inner": "bisect"},
    "llm_check": {"export_dir": "export", "max_history_token": 128},
    "llm_text": {"export_dir": "export", "prompt": "Hi", "device_model_dir": "/data/local/tmp/q"},
    "run": {"model": "m.mnn", "target": "host", "forward": "cpu", "options": {"mnn_build_dir": "build"}},
    "testdir": {"out": "td", "baseline": "base", "shape_mutable": None},
    "toggle_shape_mutable": {"test_dir": "td", "value": False},
    "import_dump": {"dump_dir": "dump", "out": "run", "execution": 0},
    "devices": {},
    "probe_device": {"serial": "R58M123", "mode": "online"},
    "case_add": {"category": "convert_segfault", "match": "Segmentation fault in MNN2QNNModel",
                 "cause": "a map miss", "fix": "re-export"},
    "fix": {"result": "diag", "input_range": {"x": [0, 255]}, "cases": "cases.jsonl"},
}
HEAVY = ("numpy", "onnx", "onnxruntime", "MNN", "matplotlib")


def test_every_operation_has_an_example_and_round_trips() -> None:
    operation("triage")  # loads the registry
    assert set(EXAMPLES) >= set(OPERATIONS), f"add examples for {sorted(set(OPERATIONS) - set(EXAMPLES))}"
    for name, op in OPERATIONS.items():
        request = op.request.model_validate(EXAMPLES[name])
        again = op.request.model_validate_json(request.model_dump_json())
        assert again == request, name
        for model in (op.request, op.result):
            json.dumps(model.model_json_schema())  # a schema the MCP server can publish


def test_models_load_without_heavy_libraries() -> None:
    code = ("import sys, qnn_debug.api.operations as o; from qnn_debug.api import OPERATIONS; "
            f"print(len(OPERATIONS), [m for m in {HEAVY!r} if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    count, heavy = proc.stdout.split(" ", 1)
    assert int(count) >= 10 and heavy.strip() == "[]", proc.stdout


@pytest.mark.parametrize(("payload", "field"), [
    ({"model": "m.onnx", "precision": "int4"}, "precision"),
    ({"model": "m.onnx", "soc": 0}, "soc"),
    ({"model": "m.onnx", "colour": "blue"}, "colour"),
    ({"model": "m.onnx", "options": {"loops": "many"}}, "options.loops"),
    ({"model": "m.onnx", "shapes": {"x": [0, 3]}}, "shapes.x.0"),
    ({}, "model"),
])
def test_a_bad_field_is_a_bad_input_error_naming_it(payload: dict[str, Any], field: str) -> None:
    with pytest.raises(BadInputError) as err:
        execute("dump", payload)
    assert f"dump: {field}:" in err.value.message and err.value.hint
    assert err.value.details["field"] == field


def test_unknown_operation_lists_the_ones_there_are() -> None:
    with pytest.raises(BadInputError) as err:
        operation("nope")
    assert "baseline" in err.value.hint and "compare" in err.value.hint


def test_path_markers_name_the_host_paths() -> None:
    dump = operation("dump").request
    assert path_fields(dump)["model"] == PathRole("file") and path_fields(dump)["out"].role == "out"
    assert {k: r.role for k, r in path_fields(TargetOptions).items()} == {
        "source_model": "in", "plugin_model": "in", "mnn2qnn": "exec", "qnn_sdk": "exec", "mnn_build_dir": "exec",
        "qnn_lib_dir": "exec", "mnn_source_dir": "exec"}
    server_set = {n for n, f in dump.model_fields.items() if marker(f, ServerSet) is not None}
    assert server_set == {"adb", "timeout", "force", "extra_options"}


def test_option_pairs_read_into_typed_options() -> None:
    parsed = parse_option_pairs(["mode=offline", "keep=true", "serial=R58", "disabled_optimizers=ConvBNFusion"])
    assert parsed["options"] == TargetOptions(mode="offline", keep=True) and parsed["serial"] == "R58"
    assert parsed["extra_options"] == {"disabled_optimizers": "ConvBNFusion"}
    with pytest.raises(BadInputError, match="cannot read --option"):
        parse_option_pairs(["novalue"])
    with pytest.raises(BadInputError, match="loops") as err:
        parse_option_pairs(["loops=many"])
    assert "mnn_build_dir" in err.value.hint  # names the allowed typed keys
    assert engine_options(parsed["options"], parsed["extra_options"], target="device", serial="R58", adb="/bin/adb") == {
        "mode": "offline", "keep": "true", "disabled_optimizers": "ConvBNFusion", "serial": "R58", "adb": "/bin/adb"}
    assert "adb" not in engine_options(None, None, target="host", serial=None, adb="/bin/adb")
    with pytest.raises(BadInputError, match="device or target=host only"):
        engine_options(TargetOptions(keep=True), None, target="htp-sim", serial=None, adb=None)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api") / "small.onnx"
    onnx.save(small_cnn(), str(path))
    return path


def _round_trip(result: BaseModel) -> None:
    assert type(result).model_validate_json(result.model_dump_json()) == result


def test_baseline_dump_compare_through_execute(small: Path) -> None:
    base = execute("baseline", {"model": str(small), "out": str(small.parent / "base"), "mnn_gate": False})
    _round_trip(base)
    run = execute("dump", {"model": str(small), "out": str(small.parent / "htp"),
                           "inputs": str(small.parent / "base" / "inputs.npz")})
    _round_trip(run)
    assert run.model_dump()["target"] == "htp-sim" and run.model_dump()["tensors"] >= 5
    result = execute("compare", {"reference": str(small.parent / "base"), "target": str(small.parent / "htp"),
                                 "local_checks": False})
    _round_trip(result)
    assert result.model_dump()["verdict"]["kind"] == "ok"


def test_quick_operations_round_trip() -> None:
    for name in ("triage", "op_lookup"):
        payload = {k: v for k, v in EXAMPLES[name].items() if k not in ("attrs", "shapes")}
        _round_trip(execute(name, payload))


# --- one declaration serves both faces: the CLI is the request model's flags, and answers what execute does ---

CLI = Path(sys.executable).parent / "qnn-debug"


def _cli_json(*args: str | Path, cwd: Path | None = None) -> dict[str, Any]:
    proc = subprocess.run([str(CLI), *map(str, args), "--json"], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_cli_and_execute_give_the_same_document(small: Path, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("QnnDsp <E> Failed to finalize graph (id: 1) with err 1002\nTensor usage is 1.\n")
    by_cli, by_api = _cli_json("triage", log, cwd=tmp_path), execute("triage", {"log_path": str(log)}).model_dump(mode="json")
    by_cli["stats"].pop("seconds"), by_api["stats"].pop("seconds")  # how long the scan took
    assert by_cli == by_api and by_cli["category"] == "finalize_failed_1002", by_cli["category"]
    assert _cli_json("op", "Convolution") == execute("op_lookup", {"op": "Convolution"}).model_dump(mode="json")
    base = small.parent / "base"
    if not base.exists():
        execute("baseline", {"model": str(small), "out": str(base), "mnn_gate": False})
    run = small.parent / "htp2"
    cli_dump = _cli_json("dump", small, "--inputs", base / "inputs.npz", "--out", run, "--soc", "57")
    assert cli_dump["soc_model"] == 57 and cli_dump["out"] == str(run.resolve())
    by_cli = _cli_json("compare", base, run, "--no-local")
    by_api = execute("compare", {"reference": str(base), "target": str(run), "local_checks": False}).model_dump(mode="json")
    by_cli.pop("elapsed_s"), by_api.pop("elapsed_s")
    assert by_cli == by_api


@pytest.mark.parametrize("name", ["dump", "compare", "bisect", "run", "llm-text", "op", "probe", "testdir"])
def test_help_texts_are_the_field_descriptions(name: str) -> None:
    from qnn_debug.cli import builder

    commands = {"dump": "dump", "compare": "compare", "bisect": "bisect", "run": "run", "llm-text": "llm_text",
                "op": "op_lookup", "probe": "probe_device", "testdir": "testdir"}
    proc = subprocess.run([str(CLI), name, "--help"], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "TERM": "dumb"})
    assert proc.returncode == 0, proc.stderr
    shown = " ".join(proc.stdout.replace("│", " ").split())
    fields = builder.cli_fields(operation(commands[name]).request)
    assert fields
    for f in fields:
        assert " ".join((f.field.description or "").split()) in shown, (name, f.name)
        assert (f.cli.flag or "").split("/")[0] in shown or f.cli.positional, (name, f.name)
