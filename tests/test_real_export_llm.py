"""llm-check, llm-text and fix on MNN folders written by MNN's own llmexport (random-weight toy Qwen3 / Qwen3-VL).

Clean exports draw no error finding; each static fault injected into the real folder
(``qnn_debug_testkit.real_faults``) is found under its finding id; llm-text tells a broken graph from a clean one
on MNN's CPU runtime (and an image-path fault from a text-path one); fix renames a misleading folder and strips
integer-tensor encodings, each proven.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug_testkit import real_faults as F

pytestmark = pytest.mark.real_export
runner = CliRunner()


def _cli(*args: str) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _ids(doc: dict[str, Any], severity: str | None = None) -> list[str]:
    return [f["id"] for f in doc["findings"] if severity is None or f["severity"] == severity]


def _mul_silu_only(finding: dict[str, Any]) -> bool:
    """The finding every llmexport 0.0.5 folder carries: the converter's C4 pass fuses silu(gate) * up into a BinaryOp
    MUL_SILU that MNN's QNN backend cannot translate (compilefornpu on a host MNN build: SIGSEGV after "Not supported
    Binary type.", on every export of this tier)."""
    return finding["id"] == "unregistered_op_in_npu_segment" and all(
        "BinaryOp MUL_SILU" in e for e in finding["evidence"] if not e.startswith("…"))


def _errors(doc: dict[str, Any]) -> list[str]:
    """Error findings other than the MUL_SILU one every export of this exporter version has."""
    return [f["id"] for f in doc["findings"] if f["severity"] == "error" and not _mul_silu_only(f)]


def _named(src: Path, tmp: Path, kind: str) -> Path:
    """A copy under a name that states the family (as a user's own export folder would)."""
    return F.copy_export(src, tmp / ("Qwen3-VL-toy" if kind == "qwen3_vl" else "Qwen3-toy"))


@pytest.mark.parametrize(("kind", "model", "export"), [
    ("qwen3", "a", "mnn"), ("qwen3", "b", "mnn"), ("qwen3", "a", "mnn8"), ("qwen3", "a", "mnn_npu"),
    ("qwen3_vl", "a", "mnn"), ("qwen3_vl", "b", "mnn")])
def test_llm_check_on_clean_real_exports_finds_only_the_fused_mul_silu(real_exports, kind: str, model: str, export: str) -> None:
    doc = _cli("llm-check", str(real_exports(kind, model, export)))
    assert _errors(doc) == [], doc["findings"]
    silu = [f for f in doc["findings"] if f["severity"] == "error" and _mul_silu_only(f)]
    assert len(silu) == 1 and "MUL_SILU" in silu[0]["title"], doc["findings"]  # one per decoder layer, C4 remedy
    assert len(silu[0]["evidence"]) == doc["settings"]["layers"] and "transformer_c4 off" in silu[0]["remedy"]
    assert ("export_not_for_npu" in _ids(doc)) == (export != "mnn_npu")  # the flag the folder was exported with
    assert doc["settings"]["weight_bits"] == (8 if export == "mnn8" else 4)
    if kind == "qwen3_vl":  # generate_llm_qnn.py's visual IO config keeps image_embeds only: true of every Qwen3-VL
        assert "vl_deepstack_output_dropped" in _ids(doc, "warning")


@pytest.mark.parametrize("model", ["a", "b"])
@pytest.mark.parametrize(("kind", "fault", "finding"), [
    ("qwen3", "index_quant", "quant_on_integer_tensor"),
    ("qwen3", "mask_dtype_config", "attention_mask_dtype"),
    ("qwen3", "renamed_vl", "family_from_folder_name"),
    ("qwen3_vl", "index_quant", "quant_on_integer_tensor"),
    ("qwen3_vl", "renamed_plain", "family_from_folder_name"),
])
def test_llm_check_finds_each_static_fault_in_a_real_export(real_exports, tmp_path: Path, model: str, kind: str,
                                                           fault: str, finding: str) -> None:
    src = real_exports(kind, model, "mnn")
    if fault == "renamed_vl":  # a text model in a folder whose name says Qwen-VL
        folder = Path(F.renamed_folder(src, tmp_path, "Qwen3-VL-text").folder)
    elif fault == "renamed_plain":  # a VL model in a folder whose name says neither Qwen nor VL
        folder = Path(F.renamed_folder(src, tmp_path, "toy-vision-export").folder)
    else:
        folder = Path(getattr(F, fault)(src, tmp_path / ("Qwen3-VL-f" if kind == "qwen3_vl" else "Qwen3-f")).folder)
    doc = _cli("llm-check", str(folder))
    assert finding in _errors(doc), doc["findings"]
    assert set(_errors(doc)) <= {finding, "vl_io_config_mismatch"}  # the wrong family brings the wrong IO
    if fault == "index_quant":
        hit = next(f for f in doc["findings"] if f["id"] == finding)
        assert hit["graph"] == "llm.mnn" and any("'position_ids'" in e for e in hit["evidence"])


def _text(ref: Path, target: Path, out: Path, *extra: str) -> dict[str, Any]:
    return _cli("llm-text", str(ref), "--target-export", str(target), "--out", str(out), "--max-new-tokens", "6",
                *extra)


@pytest.mark.parametrize(("model", "layer"), [("a", 0), ("b", 1)])
def test_llm_text_tells_a_broken_rotary_from_the_clean_real_export(real_exports, tmp_path: Path, model: str,
                                                                   layer: int) -> None:
    clean = _named(real_exports("qwen3", model, "mnn"), tmp_path, "qwen3")
    control = F.mnn_roundtrip(clean, tmp_path / "Qwen3-roundtrip")  # the faults' JSON round trip, no edit
    same = _text(clean, Path(control.folder), tmp_path / "t0")
    assert same["verdict"] == "match" and same["comparison"]["logits_sqnr_min_db"] > 60, same
    bug = F.mnn_rotary_without_neg(clean, tmp_path / "Qwen3-rotary", layer)
    diff = _text(Path(control.folder), Path(bug.folder), tmp_path / "t1")
    assert diff["verdict"] == "diverged" and diff["comparison"]["logits_sqnr_min_db"] < 30, diff


def test_llm_text_with_an_image_puts_a_dropped_deepstack_on_the_image_path(real_exports, tmp_path: Path) -> None:
    clean = _named(real_exports("qwen3_vl", "a", "mnn"), tmp_path, "qwen3_vl")
    control = F.mnn_roundtrip(clean, tmp_path / "Qwen3-VL-roundtrip")
    bug = F.mnn_deepstack_dropped(clean, tmp_path / "Qwen3-VL-deepstack", 0)
    pixels = (np.indices((64, 64)).sum(0) % 256).astype(np.uint8)
    Image.fromarray(np.stack([pixels, pixels[::-1], 255 - pixels], -1)).save(tmp_path / "img.png")
    doc = _text(Path(control.folder), Path(bug.folder), tmp_path / "t", "--image", str(tmp_path / "img.png"),
                "--also-text-only")
    assert doc["verdict"] == "diverged", doc
    assert doc["text_only"]["verdict"] == "match" and doc["image_path"] == "image_path", doc


def test_fix_links_a_misleading_vl_folder_under_a_family_name_and_proves_it(real_exports, tmp_path: Path) -> None:
    folder = Path(F.renamed_folder(real_exports("qwen3_vl", "b", "mnn"), tmp_path, "toy-vision-export").folder)
    doc = _cli("fix", str(folder), "--out", str(tmp_path / "fix"))
    assert doc["proven"], doc
    assert "family_from_folder_name" in doc["findings_before"]
    assert "family_from_folder_name" not in doc["findings_after"] and "vl_io_config_mismatch" not in doc["findings_after"]
    link = Path(doc["artefact"])
    assert link.is_symlink() and link.name.startswith("Qwen3-VL-") and link.resolve() == folder.resolve(), doc
    assert any(f"--model {link}" in c for c in doc["commands"]), doc["commands"]
    assert folder.is_dir() and not folder.is_symlink()  # the user's folder is neither moved nor replaced
    assert _errors(_cli("llm-check", str(link))) == []


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_vl"])
def test_fix_strips_integer_encodings_from_a_real_llm_mnn(real_exports, tmp_path: Path, kind: str) -> None:
    folder = Path(F.index_quant(real_exports(kind, "a", "mnn"), _named_dir(tmp_path, kind)).folder)
    doc = _cli("fix", str(folder), "--out", str(tmp_path / "fix"))
    assert doc["proven"], doc
    assert (folder / "llm.mnn.previous").is_file()
    assert _errors(_cli("llm-check", str(folder))) == []


def _named_dir(tmp: Path, kind: str) -> Path:
    return tmp / ("Qwen3-VL-iq" if kind == "qwen3_vl" else "Qwen3-iq")
