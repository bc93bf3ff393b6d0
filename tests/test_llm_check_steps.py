"""llm-check says which step each finding breaks and lists them in that order, reads C4 and inline weights from the
model itself, gives op indices for its segments and leaves out ops whose output nothing uses (on two models)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_exports import MODELS
from qnn_debug.llm.check import LlmCheckRequest, check_llm_export
from qnn_debug.mnn.model_reader import read_mnn_model
from qnn_debug_testkit.tiny import TinyExportRequest, build_tiny_export

KEYS = ("a", "b")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("llm-steps")
    out = {}
    for key in KEYS:
        cfg, layer = MODELS[key]
        for fault in ("unregistered_op", "index_quant"):
            req = TinyExportRequest(config=cfg, fault=fault, fault_layer=layer, act_quant=True)  # type: ignore[arg-type]
            out[(key, fault)] = Path(build_tiny_export(root / key / fault, req).dir)
    return out


def _mnn_tool(script: str) -> None:
    """Run MNN's converter in a child (``import _tools`` prints to fd 1)."""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=180)


def _flip_mask(folder: Path) -> None:
    cfg = json.loads((folder / "llm_config.json").read_text())
    cfg["attention_mask"] = "int" if cfg.get("attention_mask") == "float" else "float"
    (folder / "llm_config.json").write_text(json.dumps(cfg))


def _cli(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qnn_debug", "llm-check", str(folder), *extra],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("key", KEYS)
def test_findings_are_ordered_by_the_step_they_break_and_say_so(exports: dict[tuple[str, str], Path], key: str,
                                                               tmp_path: Path) -> None:
    for fault, later in (("unregistered_op", ("unregistered_op_in_npu_segment", 2)),
                         ("index_quant", ("quant_on_integer_tensor", 3))):
        folder = tmp_path / fault
        shutil.copytree(exports[(key, fault)], folder)
        _flip_mask(folder)  # a Step 1 (generateIO) fault, found after the op checks
        r = check_llm_export(LlmCheckRequest(export_dir=str(folder)))
        errors = [(f.id, f.step) for f in r.findings if f.severity == "error"]
        assert errors == [("attention_mask_dtype", 1), later], errors
        steps = [f.step for f in r.findings if f.step is not None]
        assert steps == sorted(steps) and "step" in r.order
        text = _cli(folder)
        assert text.returncode == 0, text.stderr
        assert "breaks Step 1 generateIO" in text.stdout and f"breaks Step {later[1]} " in text.stdout
        assert text.stdout.index("attention_mask_dtype") < text.stdout.index(later[0])
    # Step 2 (the compilefornpu segfault) comes before Step 3 (3110 at context-binary generation)
    rope = check_llm_export(LlmCheckRequest(export_dir=str(exports[(key, "unregistered_op")])))
    quant = check_llm_export(LlmCheckRequest(export_dir=str(exports[(key, "index_quant")])))
    assert rope.findings[0].step == 2 and quant.findings[0].step == 3


@pytest.mark.parametrize("key", KEYS)
def test_c4_is_on_when_the_model_holds_a_c4_fused_op(exports: dict[tuple[str, str], Path], key: str,
                                                     tmp_path: Path) -> None:
    folder = tmp_path / "no-args"
    shutil.copytree(exports[(key, "unregistered_op")], folder)
    st = check_llm_export(LlmCheckRequest(export_dir=str(folder))).settings
    assert st.transformer_c4 is True and "RoPE" in (st.transformer_c4_evidence or "")
    (folder / "export_args.json").unlink()
    st = check_llm_export(LlmCheckRequest(export_dir=str(folder))).settings
    assert st.transformer_c4 is True
    assert "c4=True" in _cli(folder).stdout
    other = exports[(key, "index_quant")]  # no fused op: the setting is export_args.json's
    said = json.loads((other / "export_args.json").read_text())["transformer_c4"]
    st = check_llm_export(LlmCheckRequest(export_dir=str(other))).settings
    assert st.transformer_c4 is said and st.transformer_c4_evidence == "export_args.json"


@pytest.mark.parametrize("key", KEYS)
def test_weight_file_is_needed_only_when_the_model_keeps_weights_outside(exports: dict[tuple[str, str], Path],
                                                                        key: str, tmp_path: Path) -> None:
    external = tmp_path / "external"
    shutil.copytree(exports[(key, "index_quant")], external)
    (external / "llm.mnn.weight").unlink()
    ids = [f.id for f in check_llm_export(LlmCheckRequest(export_dir=str(external))).findings]
    assert "weight_file_missing" in ids
    inline = tmp_path / "inline"
    shutil.copytree(exports[(key, "index_quant")], inline)
    (inline / "llm.mnn").unlink()
    _mnn_tool("import _tools; _tools.mnnconvert(['mnnconvert', '-f', 'MNN', '--modelFile', "
              f"{str(exports[(key, 'index_quant')] / 'llm.mnn')!r}, '--MNNModel', {str(inline / 'llm.mnn')!r}, "
              "'--bizCode', 'MNN'])")
    (inline / "llm.mnn.weight").unlink()
    r = check_llm_export(LlmCheckRequest(export_dir=str(inline)))
    assert "weight_file_missing" not in [f.id for f in r.findings], [f.title for f in r.findings]
    assert "quant_on_integer_tensor" in [f.id for f in r.findings]  # the model itself was read


@pytest.mark.parametrize("key", KEYS)
def test_segments_give_op_indices(exports: dict[tuple[str, str], Path], key: str) -> None:
    folder = exports[(key, "unregistered_op")]
    run = _cli(folder, "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    model = read_mnn_model(folder / "llm.mnn")
    assert doc["segments"]
    for seg in doc["segments"]:
        assert model.ops[seg["first_op_index"]].name == seg["first_op"]
        assert model.ops[seg["last_op_index"]].name == seg["last_op"]
        assert seg["first_op_index"] <= seg["last_op_index"]
    rope = next(f for f in doc["findings"] if f["id"] == "unregistered_op_in_npu_segment")
    pos = int(rope["evidence"][0].split()[1].rstrip(":"))
    seg = int(rope["evidence"][0].rsplit(" ", 1)[1])
    s = next(x for x in doc["segments"] if x["index"] == seg)
    assert s["first_op_index"] <= pos <= s["last_op_index"]


_UNUSE_ROPE = """
import json, sys, _tools
src, js, out = sys.argv[1:]
_tools.mnnconvert(['mnnconvert', '-f', 'MNN', '--modelFile', src, '--JsonFile', js])
net = json.load(open(js))
ops = net['oplists']
rope = [op for op in ops if op['type'] == 'RoPE']
assert rope, 'no RoPE'
for r in rope:
    by = dict(zip(r['outputIndexes'], r['inputIndexes']))
    for op in ops:
        if op is not r:
            op['inputIndexes'] = [by.get(i, i) for i in op.get('inputIndexes', [])]
json.dump(net, open(js, 'w'))
_tools.mnnconvert(['mnnconvert', '-f', 'JSON', '--modelFile', js, '--MNNModel', out, '--bizCode', 'MNN'])
"""


@pytest.mark.parametrize("key", KEYS)
def test_an_unused_c4_op_is_not_predicted_to_crash(exports: dict[tuple[str, str], Path], key: str,
                                                   tmp_path: Path) -> None:
    folder = tmp_path / "dead-rope"
    shutil.copytree(exports[(key, "unregistered_op")], folder)
    (folder / "llm.mnn").unlink()
    subprocess.run([sys.executable, "-c", _UNUSE_ROPE, str(exports[(key, "unregistered_op")] / "llm.mnn"),
                    str(tmp_path / "net.json"), str(folder / "llm.mnn")], check=True, capture_output=True, timeout=180)
    model = read_mnn_model(folder / "llm.mnn")
    assert any(op.type_name == "RoPE" for op in model.ops)  # still in the file, but nothing reads its outputs
    r = check_llm_export(LlmCheckRequest(export_dir=str(folder)))
    assert "unregistered_op_in_npu_segment" not in [f.id for f in r.findings], [f.title for f in r.findings]
