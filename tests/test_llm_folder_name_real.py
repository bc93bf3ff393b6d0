"""Folder names on exports MNN's own llmexport wrote (the real-export tier, two toy sizes of Qwen3 and Qwen3-VL):
llm-check reads the path as given (a link keeps its name) and `fix` links a misnamed folder under the name
generate_llm_qnn.py reads, with the VL encoder's IO JSON keeping both outputs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import real_exports as tier
from qnn_debug.cli import app

FAMILY = "family_from_folder_name"
NAME_FINDINGS = {FAMILY, "vl_io_config_mismatch"}


def _json(args: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _ids(doc: dict[str, Any]) -> set[str]:
    return {f["id"] for f in doc["findings"]}


@pytest.mark.parametrize("model", tier.MODELS)
def test_real_text_export_linked_under_a_vl_name(real_exports: Callable[[str, str, str], Path], tmp_path: Path,
                                                model: str) -> None:
    folder = real_exports("qwen3", model, "mnn")
    assert FAMILY not in _ids(_json(["llm-check", str(folder)]))
    link = tmp_path / "Qwen3-VL-mine"
    link.symlink_to(folder, target_is_directory=True)
    assert FAMILY in _ids(_json(["llm-check", str(link)]))  # read under the link's name, as the script would
    fixed = _json(["fix", str(link), "--out", str(tmp_path / "out")])
    assert fixed["proven"] and "VL" not in Path(fixed["artefact"]).name
    assert FAMILY in fixed["findings_before"] and FAMILY not in fixed["findings_after"]


@pytest.mark.parametrize("model", tier.MODELS)
def test_real_vl_export_under_its_exporter_name_is_linked_and_gets_its_visual_io(
        real_exports: Callable[[str, str, str], Path], tmp_path: Path, model: str) -> None:
    exported = real_exports("qwen3_vl", model, "mnn")  # the tier's cache path names the family: link it under
    folder = tmp_path / "toy-export"                   # a --dst_path that names none, as users' often do
    folder.symlink_to(exported, target_is_directory=True)
    assert NAME_FINDINGS & _ids(_json(["llm-check", str(folder)]))
    link = tmp_path / "Qwen3-VL-toy"
    link.symlink_to(folder, target_is_directory=True)
    assert not NAME_FINDINGS & _ids(_json(["llm-check", str(link)]))
    fixed = _json(["fix", str(folder), "--out", str(tmp_path / "out")])
    assert fixed["proven"], fixed
    made = Path(fixed["artefact"])
    assert made.is_symlink() and Path(os.path.realpath(made)) == exported.resolve() and "Qwen3-VL" in made.name
    visual = _json(["llm-check", str(made)])["visual"]
    assert visual["outputs"] == ["image_embeds", "deepstack_feature"]  # Qwen3-VL's encoder returns both
    io = json.loads((tmp_path / "out" / "visual_io.json").read_text())
    assert io["configs"][0]["outputs"] == visual["outputs"]
    assert [i["name"] for i in io["configs"][0]["inputs"]] == list(visual["inputs"])
    assert any("--input_json" in c for c in fixed["commands"])
