"""``llm-text --target-export`` between two exports with the same weights holds the logits to what the same CPU
runtime gives for the same weights (> 60 dB), not to NPU noise (20 dB): a broken rotary in the last layer of a
4-layer export moved the logits to 23 dB with one near-tie token flip, and was called ``near_tie_flip``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_debug_testkit.sized import Qwen3Sizes
from qnn_debug_testkit.sized_export import build_sized_export
from qnn_debug_testkit.tiny_graph import GraphFaults

CLI = str(Path(sys.executable).parent / "qnn-debug")
SIZES = Qwen3Sizes(layers=4, hidden=256, heads=8, kv_heads=4, head_dim=64, intermediate=512, vocab=1536,
                   max_position=512, seed=3)


def _llm_text(export: Path, target: Path, out: Path) -> dict:  # type: ignore[type-arg]
    proc = subprocess.run([CLI, "llm-text", str(export), "--target-export", str(target), "--max-new-tokens", "16",
                           "--out", str(out), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("same-weights")
    build_sized_export(root / "clean", SIZES)
    build_sized_export(root / "rotary", SIZES, faults=GraphFaults(wrong_rotary_layer=SIZES.layers - 1))
    return root / "clean", root / "rotary"


def test_a_graph_fault_between_exports_of_the_same_weights_is_diverged(exports: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    clean, rotary = exports
    r = _llm_text(clean, rotary, tmp_path / "bad")
    assert r["verdict"] == "diverged", r["summary"]
    assert r["comparison"]["logits_sqnr_median_db"] < 60
    assert any("byte-identical llm.mnn.weight" in n for n in r["notes"])


def test_the_same_export_still_matches(exports: tuple[Path, Path], tmp_path: Path) -> None:
    clean, _ = exports
    r = _llm_text(clean, clean, tmp_path / "same")
    assert r["verdict"] == "match" and r["comparison"]["logits_sqnr_min_db"] > 100
