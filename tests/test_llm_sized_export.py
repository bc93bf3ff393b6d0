"""The sized builder's llmexport folder (``llm.mnn`` + 4-bit block-quantised ``llm.mnn.weight``, bf16 embeddings)
read by ``llm-check`` and run by ``llm-text``, and ``llm-text``'s memory budget (checked before the runtime
starts and watched while it runs), on small sizes of two shapes (one with head_dim != hidden / heads, as real
Qwen3 has). The 0.6B-size run is ``tests/test_llm_text_scale.py`` (marked ``scale``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qnn_debug.api import execute
from qnn_debug.errors import MemoryBudgetError
from qnn_debug.llm import text_budget
from qnn_debug.llm.mnn_extras import read_mnn_extras
from qnn_debug_testkit.sized import Qwen3Sizes
from qnn_debug_testkit.sized_export import SizedExport, build_sized_export

CLI = str(Path(sys.executable).parent / "qnn-debug")
SIZES = {
    # head_dim 64 with hidden 256 and 8 heads (not 256 / 8 = 32), block 64
    "wide_heads": (Qwen3Sizes(layers=2, hidden=256, heads=8, kv_heads=4, head_dim=64, intermediate=512, vocab=1536,
                              max_position=512, seed=3), 64),
    # 3 layers, block 32
    "deeper": (Qwen3Sizes(layers=3, hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=384, vocab=777,
                          max_position=512, seed=8), 32),
}


def cli(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = subprocess.run([CLI, *args, "--json"], capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SizedExport]:
    root = tmp_path_factory.mktemp("sized-export")
    return {name: build_sized_export(root / name, sizes, quant_block=block) for name, (sizes, block) in SIZES.items()}


def _quantised_bytes(s: Qwen3Sizes, block: int) -> int:
    """4-bit codes plus an asymmetric fp32 (scale, offset) pair per block of every projection and the lm_head."""
    h, hd, f = s.hidden, s.head_dim, s.intermediate
    mats = [(s.heads * hd, h), (s.kv_heads * hd, h), (s.kv_heads * hd, h), (h, s.heads * hd), (f, h), (f, h), (h, f)]
    params = s.layers * sum(o * i for o, i in mats) + s.vocab * h
    return params // 2 + 8 * params // block


@pytest.mark.parametrize("name", sorted(SIZES))
def test_sized_export_is_4bit_block_quantised_and_runs(exports: dict[str, SizedExport], name: str, tmp_path: Path) -> None:
    e = exports[name]
    sizes, block = SIZES[name]
    folder = Path(e.dir)
    assert {"llm.mnn", "llm.mnn.weight", "embeddings_bf16.bin", "llm_config.json", "config.json", "tokenizer.txt",
            "export_args.json"} <= {p.name for p in folder.iterdir()}
    assert not any(p.name.endswith(".onnx") or p.name.startswith(".") for p in folder.rglob("*")), "fp32 scratch left"
    assert (folder / "embeddings_bf16.bin").stat().st_size == sizes.vocab * sizes.hidden * 2
    # the weights live in llm.mnn.weight (not inline in llm.mnn), 4-bit with one scale pair per block:
    # fp32 would be 8x the codes, 8-bit 2x, per-channel scales far fewer bytes than per block
    assert read_mnn_extras(e.mnn).external_refs > 0
    assert Path(e.mnn).stat().st_size < e.mnn_weight_bytes / 4
    # + the fp32 rotary tables; the rest (norm gains, weight headers) is measured at 2-3 %; a block twice as
    # large or small moves the total by 7-13 %
    expected = _quantised_bytes(sizes, block) + 2 * sizes.max_position * sizes.head_dim * 4
    assert expected <= e.mnn_weight_bytes <= 1.05 * expected
    assert e.mnn_weight_bytes < 0.25 * e.fp32_weight_bytes
    assert e.convert_peak_rss > 0

    rc, check = cli("llm-check", e.dir)
    assert rc == 0 and check["settings"]["weight_bits"] == 4 and check["settings"]["layers"] == sizes.layers, check
    rc, text = cli("llm-text", e.dir, "--out", str(tmp_path / "text"), "--max-new-tokens", "5", "--max-memory", "2G")
    assert rc == 0, text
    ref = text["reference"]
    logits = np.load(ref["logits"])
    assert len(ref["tokens"]) == logits.shape[0] <= 5 and logits.shape[1] == sizes.vocab
    assert ref["tokens"] == [int(t) for t in logits.argmax(axis=1)]


def test_llm_text_refuses_an_export_over_the_memory_budget(exports: dict[str, SizedExport], tmp_path: Path) -> None:
    for name, e in exports.items():
        out = tmp_path / name
        rc, doc = cli("llm-text", e.dir, "--out", str(out), "--max-memory", "64M")
        assert rc == 2 and doc["error"] == "memory_budget", doc
        assert "over the memory budget of 0.06 GiB" in doc["message"] and "--max-memory" in doc["hint"]
        assert doc["details"]["weight_bytes"] == e.mnn_weight_bytes
        assert not (out / "reference" / "mnn_llm.log").exists()  # refused before the runtime started


def test_llm_text_worker_stopped_when_it_outgrows_the_budget(exports: dict[str, SizedExport], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An estimate that is wrong (zeroed here) does not let the runtime pass the budget: its watchdog stops it."""
    monkeypatch.setattr(text_budget, "PROCESS_BASE", 0)
    monkeypatch.setattr(text_budget, "WEIGHT_FACTOR", 0.0)
    e = exports["wide_heads"]
    with pytest.raises(MemoryBudgetError) as info:
        execute("llm_text", {"export_dir": e.dir, "out": str(tmp_path / "o"), "max_new_tokens": 4, "max_memory": "24M"})
    err = info.value
    assert err.details["rss_bytes"] > err.details["budget_bytes"] == 24 << 20
    assert "MNN LLM runtime reached" in err.message and "--max-memory" in (err.hint or "")
    assert (tmp_path / "o" / "reference" / "mnn_llm.log").is_file()
