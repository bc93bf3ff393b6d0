"""A run whose tensors cannot fit the disk of ``--out`` is refused before it starts, with the numbers.

The estimate is checked against what a baseline really writes on graphs nobody wrote for it: PP-OCR's detector
and recogniser (the rapidocr wheel's), MNN's real llmexport decoder and torch.onnx's three exports of that model. The refusal itself is driven
with a double of the disk's free space (``fake_free``): this machine's disk is not ours to fill.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from qnn_debug import api, disk_room
from qnn_debug.baseline_models import BaselineResult
from qnn_debug.cli import app
from qnn_debug.disk_room import computed_bytes, disk_need
from qnn_debug.errors import DiskSpaceError


def _reference_bytes(baseline_dir: Path) -> int:
    """Bytes of the tensor arrays the baseline kept of the reference (headers aside)."""
    total = 0
    for f in (baseline_dir / "reference" / "tensors").glob("*.npy"):
        total += int(np.load(f, mmap_mode="r").nbytes)
    return total


def _out(doc: object) -> Path:
    assert isinstance(doc, BaselineResult)
    return Path(doc.out)


@pytest.fixture
def fake_free(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Stand-in for the free space of every disk, as the disk check reads it."""
    real = shutil.disk_usage

    def set_free(free: int) -> None:
        def usage(path: Any) -> Any:
            u = real(path)
            return type(u)(u.total, u.total - free, free)

        monkeypatch.setattr(disk_room.shutil, "disk_usage", usage)

    return set_free


@pytest.mark.parametrize(("which", "shapes"), [("ppocr_det", {"x": [1, 3, 64, 96]}), ("ppocr_rec", {"x": [1, 3, 48, 160]})])
def test_the_estimate_is_what_the_baseline_keeps_of_a_real_model(request: pytest.FixtureRequest, tmp_path: Path,
                                                                 which: str, shapes: dict[str, list[int]]) -> None:
    model = request.getfixturevalue(which)
    doc = api.execute("baseline", {"model": str(model), "out": str(tmp_path / "b"), "shapes": shapes,
                                   "mnn_gate": False})
    kept = _reference_bytes(_out(doc))
    estimate = computed_bytes(model, shapes)
    assert 0.9 * kept <= estimate <= 1.1 * kept, (estimate, kept)


@pytest.mark.slow
def test_the_estimate_on_a_real_llmexport_decoder(real_exports: Any, tmp_path: Path) -> None:
    from qnn_debug.llm.onnx_export import prepare_model
    from qnn_debug_testkit import real_faults as F

    folder = F.copy_export(real_exports("qwen3", "a", "onnx"), tmp_path / "clean")
    doc = api.execute("baseline", {"model": str(folder / "onnx" / "llm.onnx"), "out": str(tmp_path / "b"),
                                   "mnn_gate": False})
    p = prepare_model(folder / "onnx" / "llm.onnx")  # the graph and inputs the baseline ran
    kept = _reference_bytes(_out(doc))
    estimate = computed_bytes(p.model, p.shapes, p.inputs)
    assert 0.9 * kept <= estimate <= 1.1 * kept, (estimate, kept)


@pytest.mark.real_export
@pytest.mark.parametrize("flavour", ["ts", "ts_fp16", "dynamo"])
def test_the_estimate_on_torch_onnx_exports_of_the_same_decoder(torch_exports: Any, tmp_path: Path,
                                                                 flavour: str) -> None:
    """Held out (the estimate was shaped on PP-OCR's detector and llmexport's decoder): 1.00 of what is kept."""
    model = torch_exports("qwen3", "a", flavour)
    doc = api.execute("baseline", {"model": str(model), "out": str(tmp_path / "b"), "mnn_gate": False})
    kept = _reference_bytes(_out(doc))
    estimate = computed_bytes(model)
    assert 0.9 * kept <= estimate <= 1.1 * kept, (estimate, kept)


def test_a_diagnose_that_cannot_fit_is_refused_before_it_writes(ppocr_det: Path, tmp_path: Path,
                                                               fake_free: Callable[[int], None]) -> None:
    shapes = {"x": [1, 3, 256, 256]}
    tensors = computed_bytes(ppocr_det, shapes)
    fake_free(2 * tensors + disk_room.HEADROOM)  # room for a baseline, not for the dump beside it
    res = CliRunner().invoke(app, ["diagnose", str(ppocr_det), "--shape", "x=1x3x256x256",
                                   "--out", str(tmp_path / "d"), "--json"])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["type"] == "DiskSpaceError" and doc["details"]["copies"] == 3
    assert doc["details"]["tensors"] == tensors and "--out" in doc["hint"]
    assert "GB free" in doc["message"]
    assert not (tmp_path / "d").exists()  # nothing started
    ok = CliRunner().invoke(app, ["baseline", str(ppocr_det), "--shape", "x=1x3x256x256", "--no-mnn-gate",
                                  "--out", str(tmp_path / "b"), "--json"])
    assert ok.exit_code == 0, ok.output  # two copies fit


def test_a_resumed_run_counts_what_its_folder_already_holds(ppocr_det: Path, tmp_path: Path,
                                                            fake_free: Callable[[int], None]) -> None:
    shapes = {"x": [1, 3, 128, 128]}
    api.execute("baseline", {"model": str(ppocr_det), "out": str(tmp_path / "d" / "baseline"), "shapes": shapes,
                             "mnn_gate": False})
    need = disk_need(tmp_path / "d", "diagnose", ppocr_det, shapes)
    assert need.already >= 2 * need.tensors * 0.9  # reference and floor are there
    fake_free(need.needed)
    disk_room.check_disk_room(tmp_path / "d", "diagnose", ppocr_det, shapes)  # the dump's third copy fits
    with pytest.raises(DiskSpaceError):
        disk_room.check_disk_room(tmp_path / "elsewhere", "diagnose", ppocr_det, shapes)
