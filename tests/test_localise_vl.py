"""Qwen3-VL localisation: both graphs, the four faults real ports make, found at their segment and op with the
right kind, through the CLI (and one through the MCP client), on two sizes of two builders (this project's small
VL graphs in ``vl_graphs`` and the VL export builder ``qnn_debug_testkit.vl``); the rotary layout trials on their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qnn_debug.compare.rotary_positions import alternatives, mrope_axes, table_alternatives
from qnn_debug_testkit.vl import VLExportRequest, build_vl_export
from vl_graphs import LARGER_D, LARGER_V, TINY_D, TINY_V, mrope_reindex, write_pair


def cli(tmp: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "localise-blocks", *args, "--json"], capture_output=True,
                          text=True, check=False, cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


# ---- the trials on their own: numbers in, the right layout out -------------------------------------------------

def _mrope_table(ids: np.ndarray, sections: tuple[int, int, int], interleaved: bool) -> np.ndarray:
    half = sum(sections)
    theta = 1.0 / (5e6 ** (np.arange(half) / half))
    axis = mrope_axes(sections, interleaved)
    ang = ids[axis, :].T * theta  # [T, half]
    return np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)


@pytest.mark.parametrize("sections", [(6, 5, 5), (24, 20, 20)])
def test_mrope_trials_name_chunked_and_interleaved_with_their_sections(sections: tuple[int, int, int]) -> None:
    from qnn_debug.llm.vl_feeds import decoder_position_ids

    ids = decoder_position_ids(32, grid=(4, 6)).astype(np.int64)
    for own in (True, False):
        alts = alternatives(ids, lambda v, own=own: _mrope_table(v, sections, own), "position_ids")
        layout = next(k for k in alts if k.startswith("M-RoPE sections"))
        assert ("contiguous chunks" in layout.split("where")[0]) == own, layout
        # the lowest frequencies barely move between these positions: any row fits them, to within 1e-3
        assert np.abs(alts[layout] - _mrope_table(ids, sections, not own)).max() < 1e-3
        assert np.abs(alts[layout] - _mrope_table(ids, sections, own)).max() > 0.1  # a real alternative
    # the exporter's Gather indices say the same: Qwen3-VL interleaves, Qwen2-VL chunks
    half = sum(sections)
    assert (mrope_reindex(sections, True) // half == mrope_axes(sections, True)).all()
    assert (mrope_reindex(sections, False) // half == mrope_axes(sections, False)).all()


def test_table_trials_rebuild_the_vision_rows_swapped_from_cos_and_sin_alone() -> None:
    from qnn_debug.llm.vl_feeds import vision_position_ids

    ids = vision_position_ids([(4, 4), (4, 6)]).astype(np.int64)
    q = 8
    theta = 1.0 / (10000 ** (np.arange(q) / q))

    def tables(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ang = np.concatenate([rows[0][:, None] * theta, rows[1][:, None] * theta], axis=-1)  # h freqs then w
        ang = np.concatenate([ang, ang], axis=-1)[:, None, :]
        return np.cos(ang), np.sin(ang)

    cos, sin = tables(ids)
    alts = table_alternatives(cos, sin, ids, "position_ids")
    (label, (c, s)), = alts.items()
    assert "rows swapped" in label
    swapped = tables(ids[[1, 0]])
    assert np.abs(c - swapped[0]).max() < 1e-9 and np.abs(s - swapped[1]).max() < 1e-9


# ---- localise-blocks on the small VL graphs: tiny with the segment's diagnosis, larger without -----------------

VISION = [("rows_swapped", "outside the layers, before layer 0", "/rotary/Cast", "rotary_layout", "rows swapped"),
          ("mask_not_copied", "layer 0", "/blocks.0/attn/Add", "zero_input", "as zeros")]
DECODER = [("chunked_mrope", "outside the layers, before layer 0", "/rotary/Gather", "rotary_layout",
            "in contiguous chunks t|h|w (Qwen2-VL layout) where the model interleaves"),
           ("deepstack_dropped", "outside the layers, between layer 0 and layer 1", "/Add_1", None, "missing in the target")]


@pytest.mark.parametrize(("fault", "segment", "op", "pattern", "words"), VISION + DECODER)
def test_cli_finds_each_vl_fault_at_its_segment_and_op_tiny(tmp_path: Path, fault: str, segment: str, op: str,
                                                           pattern: str | None, words: str) -> None:
    which, sizes = ("visual", TINY_V) if (fault, segment, op, pattern, words) in VISION else ("llm", TINY_D)
    clean, bug = write_pair(tmp_path, which, sizes, fault)
    r = cli(tmp_path, str(bug), "--reference-model", str(clean), "--out", "blocks")
    assert r["graph"] == ("vision encoder" if which == "visual" else "decoder (M-RoPE)")
    assert r["verdict"] == "real_bug"
    bad = [b for b in r["blocks"] if b["bad"]]
    assert (bad[0]["label"] or f"layer {bad[0]['first']}") == segment, r["blocks"]
    assert r["first_failing"]["op"] == op, r["first_failing"]
    if pattern is not None:
        assert r["block_pattern"] == pattern and words in r["summary"], r["summary"]
    else:  # a dropped op is named from the graphs alone: no diagnosis needed
        assert words in r["first_failing"]["method"] and "reads '/layers.0/Add_1_output_0' in its place" in r["summary"]
    assert segment in r["summary"]


@pytest.mark.parametrize(("fault", "segment", "op"), [(f, s, o) for f, s, o, _, _ in VISION + DECODER])
def test_cli_finds_each_vl_fault_at_its_segment_and_op_larger(tmp_path: Path, fault: str, segment: str, op: str) -> None:
    which, sizes = ("visual", LARGER_V) if fault in ("rows_swapped", "mask_not_copied") else ("llm", LARGER_D)
    clean, bug = write_pair(tmp_path, which, sizes, fault)
    r = cli(tmp_path, str(bug), "--reference-model", str(clean), "--inner", "none", "--out", "blocks")
    bad = [b for b in r["blocks"] if b["bad"]]
    assert (bad[0]["label"] or f"layer {bad[0]['first']}") == segment, r["blocks"]
    assert r["first_failing"]["op"] == op and r["first_failing"]["block"] == segment
    n_layers = sizes.blocks if which == "visual" else sizes.layers  # type: ignore[union-attr]
    assert len([b for b in r["blocks"] if not b["label"]]) == n_layers


# ---- the VL export builder's folders: a folder and --graph, its own inputs, two sizes --------------------------

@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vl")
    out = {"clean": Path(build_vl_export(root / "Qwen3-VL-clean", VLExportRequest(mnn=False)).dir)}
    for fault in ("vision_rotary_swapped", "vision_mask_not_copied", "mrope_chunked", "deepstack_dropped"):
        out[fault] = Path(build_vl_export(root / f"Qwen3-VL-{fault}", VLExportRequest(mnn=False, fault=fault)).dir)
    return out


BUILDER = [("vision_rotary_swapped", "visual", "layer 3", "/blocks.3/self_attn/rotary_q/Mul", "rotary_layout",
            "rows swapped (the 2-D vision rotary reads w as h"),
           ("vision_mask_not_copied", "visual", "layer 3", "/blocks.3/self_attn/Add", None, ""),
           ("mrope_chunked", "llm", "layer 0", "/layers.0/self_attn/rotary_q/Mul", "rotary_layout",
            "in contiguous chunks t|h|w (Qwen2-VL layout)"),
           ("deepstack_dropped", "llm", "layer 0", "/layers.0/deepstack/Add", None, "missing in the target")]


@pytest.mark.parametrize(("fault", "graph", "segment", "op", "pattern", "words"), BUILDER)
def test_cli_on_vl_export_folders_with_their_own_inputs(tmp_path: Path, exports: dict[str, Path], fault: str,
                                                        graph: str, segment: str, op: str, pattern: str | None,
                                                        words: str) -> None:
    # the builder's inputs carry float32's lowest in the masks, as the runtime writes them
    inputs = exports[fault] / "onnx" / f"{graph}_inputs.npz"
    inner = "diagnose" if pattern is not None else "none"  # the diagnosis is what names the kind
    r = cli(tmp_path, str(exports[fault]), "--graph", graph, "--reference-model", str(exports["clean"]),
            "--inputs", str(inputs), "--inner", inner, "--out", "blocks")
    assert r["graph"] == ("vision encoder" if graph == "visual" else "decoder (M-RoPE)")
    bad = [b for b in r["blocks"] if b["bad"]]
    assert (bad[0]["label"] or f"layer {bad[0]['first']}") == segment, r["blocks"]
    assert r["first_failing"]["op"] == op, r["first_failing"]
    if pattern is not None:
        assert r["block_pattern"] == pattern and words in r["summary"], r["summary"]
    else:
        assert words in r["first_failing"]["method"]


def test_a_folder_without_the_graph_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "Qwen3-VL-x").mkdir()
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "localise-blocks", "Qwen3-VL-x", "--graph", "llm",
                           "--json"], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert "holds no llm.onnx" in doc["message"] and "llmexport" in doc["hint"]


def test_larger_vl_export_vision_fault_without_inputs(tmp_path: Path) -> None:
    """Real Qwen3-VL widths are too slow here; a wider, deeper builder config (head_dim 64, 6 blocks) stands in,
    with no --inputs: the vision feeds are built from the graph (two images, so the mask matters)."""
    from vl_models import write_small_config

    cfg = write_small_config(tmp_path / "cfg")
    req = {"hf_config": str(cfg), "mnn": False, "image_grid": (8, 8)}
    clean = build_vl_export(tmp_path / "Qwen3-VL-small", VLExportRequest(**req))
    bug = build_vl_export(tmp_path / "Qwen3-VL-small-bug", VLExportRequest(**req, fault="vision_mask_not_copied"))
    r = cli(tmp_path, bug.dir, "--reference-model", clean.dir, "--inner", "none", "--out", "blocks")
    last = clean.sizes.vision.depth - 1
    assert r["graph"] == "vision encoder" and r["first_failing_block"]["first"] == last
    assert r["first_failing"]["op"] == f"/blocks.{last}/self_attn/Add"
    assert (tmp_path / "blocks" / "vl_inputs.npz").is_file()  # the feeds it built, for the next command


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_localise_blocks_names_the_chunked_mrope(tmp_path: Path) -> None:
    from test_mcp_support import connect, ok

    write_pair(tmp_path, "llm", TINY_D, "chunked_mrope")
    async with connect(tmp_path, "auto") as client:
        doc = ok(await client.call_tool("localise_blocks", {"model": "llm_chunked_mrope.onnx",
                                                            "reference_model": "llm.onnx", "background": False}))
    r = doc.get("result", doc)
    assert r["graph"] == "decoder (M-RoPE)" and r["block_pattern"] == "rotary_layout"
    assert r["first_failing"]["op"] == "/rotary/Gather" and "Qwen2-VL layout" in r["summary"]


def test_bisect_builds_vl_inputs_and_finds_the_swapped_vision_rows(tmp_path: Path) -> None:
    clean, bug = write_pair(tmp_path, "visual", TINY_V, "rows_swapped")
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "bisect", str(bug), "--reference-model", str(clean),
                           "--no-mnn-gate", "--out", "bisect", "--json"], capture_output=True, text=True, check=False,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert r["verdict"] == "real_bug" and r["first_failing"]["op"] == "/rotary/Cast", r["first_failing"]
    assert (tmp_path / "bisect" / "vl_inputs.npz").is_file()


def test_cli_on_a_vl_folder_without_inputs_names_the_chunked_mrope(tmp_path: Path, exports: dict[str, Path]) -> None:
    """No --inputs: the decoder's 3-row ids and deepstack features are built from the graph; the M-RoPE layout is
    read off the cos/sin tables the cut-out layer reads (fp32 values, not the graph that made them)."""
    r = cli(tmp_path, str(exports["mrope_chunked"]), "--graph", "llm", "--reference-model", str(exports["clean"]),
            "--out", "blocks")
    assert r["first_failing"]["op"] == "/layers.0/self_attn/rotary_q/Mul" and r["block_pattern"] == "rotary_layout"
    assert "M-RoPE sections [6, 5, 5]" in r["summary"] and "Qwen2-VL layout" in r["summary"], r["summary"]
