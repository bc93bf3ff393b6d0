"""The Qwen3-VL export builder: MNN's IO, real ONNX graphs on ORT, real .mnn files, faults where meant, two sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.llm.mnn_extras import read_mnn_extras
from qnn_debug.mnn.model_reader import read_mnn_model
from qnn_debug_testkit.sized import LazyWeights
from qnn_debug_testkit.tiny_graph import VLText, build_graph, mrope_index
from qnn_debug_testkit.vl import VL_FAULTS, VLExport, VLExportRequest, build_vl_export, load_inputs
from qnn_debug_testkit.vl_inputs import vision_inputs
from qnn_debug_testkit.vl_sizes import preset, vl_sizes_from_hf_config
from vl_models import write_small_config

VISUAL_IO = ["patches", "position_ids", "attention_mask", "idx_tensor", "weight_tensor"]
LLM_IO = ["input_ids", "attention_mask", "position_ids", "logits_index", "deepstack_embeds"]


def _run(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], VLExport]:
    """Clean (converted) and each fault, at the tiny size and at the small config.json size."""
    root = tmp_path_factory.mktemp("vl")
    small_cfg = str(write_small_config(root / "hf"))
    out: dict[tuple[str, str], VLExport] = {}
    for size, base in (("tiny", VLExportRequest()), ("small", VLExportRequest(hf_config=small_cfg, image_grid=(6, 8)))):
        for fault in (None, *VL_FAULTS):
            req = base.model_copy(update={"fault": fault, "mnn": fault in (None, "index_quant")})
            out[(size, fault or "clean")] = build_vl_export(root / f"Qwen3-VL-{size}-{fault or 'clean'}", req)
    return out


def test_sizes_presets_and_hf_config(tmp_path: Path) -> None:
    real = preset("qwen3-vl-2b")
    assert (real.vision.hidden, real.vision.depth, real.vision.deepstack_indexes) == (1024, 24, [5, 11, 17])
    assert (real.text.hidden, real.text.layers, real.text.head_dim, real.mrope_section) == (2048, 28, 128, (24, 20, 20))
    assert real.vision.patch_dim == 1536 and real.vision.num_grid_per_side == 48
    cut = preset("qwen3-vl-2b", depth=4, layers=2)
    assert cut.vision.depth == 4 and len(cut.vision.deepstack_indexes) == 3 and max(cut.vision.deepstack_indexes) < 4
    small = vl_sizes_from_hf_config(write_small_config(tmp_path))
    assert (small.vision.hidden, small.vision.num_grid_per_side, small.text.head_dim) == (128, 12, 64)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hidden_size": 8}), encoding="utf-8")
    with pytest.raises(BadInputError, match="vision_config"):
        vl_sizes_from_hf_config(bad)


def test_vision_inputs_follow_mnn_formulas() -> None:
    v = preset("tiny").vision
    pixels = np.random.default_rng(0).uniform(0, 255, (4, 3, 64, 96)).astype(np.float32)  # 2 groups, 4x6 patches
    x = vision_inputs(v, pixels)
    assert x["patches"].shape == (48, 1536) and x["position_ids"].shape == (2, 48)
    # merge-block order: the first four rows are the 2x2 block at the top-left corner
    assert x["position_ids"][:, :4].tolist() == [[0, 0, 1, 1], [0, 1, 0, 1]]
    assert x["position_ids"][:, 24:28].tolist() == [[0, 0, 1, 1], [0, 1, 0, 1]]  # second temporal group repeats
    mask = x["attention_mask"][0]
    assert (mask[:24, :24] == 0).all() and (mask[24:, 24:] == 0).all() and (mask[:24, 24:] < -1e38).all()
    assert np.allclose(x["weight_tensor"].sum(axis=0), 1.0)  # bilinear weights of each patch sum to one
    assert x["idx_tensor"].min() >= 0 and x["idx_tensor"].max() < v.num_grid_per_side ** 2
    assert x["idx_tensor"][:, 0].tolist() == [0, 1, 8, 9]  # top-left patch: corners (0,0),(0,1),(1,0),(1,1)
    # patch row 0 = the 16x16 pixels at the top-left of both frames of group 0, channel-major
    first = ((pixels[:2, :, :16, :16] / 255.0 - 0.5) / 0.5).transpose(1, 0, 2, 3).reshape(-1)
    assert np.allclose(x["patches"][0], first, atol=1e-6)


def test_mrope_layouts() -> None:
    inter, chunk = mrope_index((24, 20, 20), True), mrope_index((24, 20, 20), False)
    axis_i, axis_c = inter // 64, chunk // 64
    assert axis_i[:6].tolist() == [0, 1, 2, 0, 1, 2] and axis_i[60:].tolist() == [0, 0, 0, 0]
    assert axis_c.tolist() == [0] * 24 + [1] * 20 + [2] * 20
    assert (inter % 64 == np.arange(64)).all() and (chunk % 64 == np.arange(64)).all()
    # text-only positions (three equal rows) cannot tell the layouts apart; an image's (t, h, w) can
    sizes = preset("tiny")
    t = sizes.text
    w = LazyWeights(t)
    n = 12
    feeds = {"input_ids": w.embed_rows(np.arange(40, 40 + n))[:, None, :],
             "attention_mask": np.triu(np.full((n, n), -3.4e38, np.float32), 1)[None, None],
             "position_ids": np.repeat(np.arange(n, dtype=np.int32)[None], 3, 0), "logits_index": np.asarray([-1], np.int32),
             "deepstack_embeds": np.zeros((3, n, t.hidden), np.float32)}
    vl = VLText(mrope_section=sizes.mrope_section)
    good = build_graph(t, w, seq_len=n, vl=vl).SerializeToString()
    bad = build_graph(t, w, seq_len=n, vl=vl.model_copy(update={"chunked_layers": [0, 1, 2]})).SerializeToString()
    assert np.allclose(_run(good, feeds)[0], _run(bad, feeds)[0], atol=1e-5)  # type: ignore[arg-type]
    feeds["position_ids"] = np.stack([np.arange(n), np.arange(n) % 3 * 2, np.arange(n) % 4]).astype(np.int32)
    assert _rel(_run(bad, feeds)[0], _run(good, feeds)[0]) > 1e-2  # type: ignore[arg-type]


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_export_folder_is_llmexports(builds: dict[tuple[str, str], VLExport], size: str) -> None:
    r = builds[(size, "clean")]
    d = Path(r.dir)
    for f in ("visual.mnn", "visual.mnn.weight", "llm.mnn", "llm.mnn.weight", "config.json", "llm_config.json",
              "export_args.json", "tokenizer.txt", "embeddings_bf16.bin", "onnx/visual.onnx", "onnx/llm.onnx",
              "onnx/visual_inputs.npz", "onnx/llm_inputs.npz"):
        assert (d / f).is_file(), f
    assert r.folder_name_matches
    cfg = json.loads((d / "llm_config.json").read_text(encoding="utf-8"))
    assert cfg["model_type"] == "qwen3_vl" and cfg["is_visual"] and cfg["is_mrope"] and cfg["has_deepstack"]
    assert cfg["num_grid_per_side"] == r.sizes.vision.num_grid_per_side and cfg["image_size_unit"] == 32
    assert cfg["image_pad"] != cfg["vision_start"] != cfg["vision_end"]
    assert "mllm" in json.loads((d / "config.json").read_text(encoding="utf-8"))
    visual, llm = read_mnn_model(d / "visual.mnn"), read_mnn_model(d / "llm.mnn")
    assert [i.name for i in visual.inputs] == VISUAL_IO
    assert [i.name for i in llm.inputs] == LLM_IO
    assert [i.shape[0] for i in llm.inputs if i.name in ("position_ids", "deepstack_embeds")] == [3, 3]
    assert {"image_embeds", "deepstack_feature"} <= set(visual.output_names)
    assert sum(op.type_name == "Attention" for op in llm.ops) == r.sizes.text.layers
    vis_in, llm_in = load_inputs(r.visual_inputs), load_inputs(r.llm_inputs)
    embeds, deep = _run(r.visual_onnx, vis_in)
    k, hidden = r.sizes.deepstack, r.sizes.text.hidden
    assert embeds.shape == (r.vision_seq // 4, 1, hidden) and deep.shape == (k, r.vision_seq // 4, hidden)
    # the prompt carries the clean encoder's outputs at its image tokens, deepstack features included
    pads = (llm_in["deepstack_embeds"][0] != 0).any(axis=1)
    assert int(pads.sum()) == r.image_tokens
    assert np.allclose(llm_in["input_ids"][pads, 0], embeds[:, 0]) and np.allclose(llm_in["deepstack_embeds"][:, pads], deep)
    assert _run(r.llm_onnx, llm_in)[0].shape == (1, 1, r.sizes.text.vocab)


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_faults_change_the_graph_they_belong_to(builds: dict[tuple[str, str], VLExport], size: str) -> None:
    clean = builds[(size, "clean")]
    ref_v = _run(clean.visual_onnx, load_inputs(clean.visual_inputs))
    ref_l = _run(clean.llm_onnx, load_inputs(clean.llm_inputs))
    for fault in ("vision_rotary_swapped", "vision_mask_not_copied", "mrope_chunked", "deepstack_dropped"):
        r = builds[(size, fault)]
        v = _run(r.visual_onnx, load_inputs(r.visual_inputs))
        l_ = _run(r.llm_onnx, load_inputs(r.llm_inputs))
        vision_err, llm_err = _rel(v[0], ref_v[0]), _rel(l_[0], ref_l[0])
        if fault.startswith("vision"):
            assert vision_err > 1e-2 and llm_err == 0.0, (fault, vision_err, llm_err)
            # the fault sits in the last block, after every deepstack block: the deepstack features are untouched
            assert r.fault_layer == r.sizes.vision.depth - 1 and _rel(v[1], ref_v[1]) < 1e-6
        else:
            assert vision_err == 0.0 and llm_err > 1e-2 and r.fault_layer == 0, (fault, vision_err, llm_err)
    # the Tile fault changes the ops, not the numbers
    tiled = builds[(size, "vision_unregistered_op")]
    assert any(n.op_type == "Tile" for n in onnx.load(tiled.visual_onnx).graph.node)
    assert _rel(_run(tiled.visual_onnx, load_inputs(tiled.visual_inputs))[0], ref_v[0]) < 1e-6


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_index_quant_puts_encodings_on_both_graphs_integer_inputs(builds: dict[tuple[str, str], VLExport], size: str) -> None:
    r, clean = builds[(size, "index_quant")], builds[(size, "clean")]
    assert r.quantized_tensors["visual"] >= 2 and r.quantized_tensors["llm"] >= 2
    for name, wanted in (("visual", {"idx_tensor", "position_ids"}), ("llm", {"position_ids"})):
        model = read_mnn_model(Path(r.dir) / f"{name}.mnn")
        quantized = {model.tensor_names[i] for i in read_mnn_extras(Path(r.dir) / f"{name}.mnn").encodings}
        assert wanted <= quantized, (name, quantized)
        assert not read_mnn_extras(Path(clean.dir) / f"{name}.mnn").encodings


def test_visual_mnn_is_the_onnx_graph_on_mnn_cpu(builds: dict[tuple[str, str], VLExport], tmp_path: Path) -> None:
    """Through the public baseline command: MNN CPU runs our visual.mnn and agrees with ONNX Runtime."""
    r = builds[("small", "clean")]
    res = CliRunner().invoke(app, ["baseline", r.visual_onnx, "--inputs", r.visual_inputs, "--out", str(tmp_path / "b"),
                                   "--mnn-model", str(r.visual_mnn), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout.strip().splitlines()[-1])["report"]
    assert report["trusted"] and report["mnn_model"]["gate"]["status"] == "passed"


def test_bad_requests(builds: dict[tuple[str, str], VLExport], tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not empty"):
        build_vl_export(builds[("tiny", "clean")].dir)
    with pytest.raises(BadInputError, match="fault_layer"):
        build_vl_export(tmp_path / "a", VLExportRequest(fault="deepstack_dropped", fault_layer=3))
    with pytest.raises(BadInputError, match="image_grid"):
        build_vl_export(tmp_path / "b", VLExportRequest(image_grid=(5, 8)))
    renamed = build_vl_export(tmp_path / "renamed-export", VLExportRequest(mnn=False))
    assert not renamed.folder_name_matches and renamed.visual_mnn is None


def test_external_data_build_is_the_same_model(builds: dict[tuple[str, str], VLExport], tmp_path: Path) -> None:
    """The real-size path (weights streamed into .onnx.data, the converter's source with inline rotary tables) at the
    small size: the same numbers as the inline build, and both .mnn files converted."""
    inline = builds[("small", "clean")]
    r = build_vl_export(tmp_path / "Qwen3-VL-ext", VLExportRequest(hf_config=str(write_small_config(tmp_path / "hf")),
                                                                    image_grid=(6, 8), external_data=True))
    for name in ("visual", "llm"):
        data = Path(r.dir) / "onnx" / f"{name}.onnx.data"
        assert data.stat().st_size > Path(getattr(r, f"{name}_onnx")).stat().st_size
        got = _run(getattr(r, f"{name}_onnx"), load_inputs(getattr(r, f"{name}_inputs")))
        want = _run(getattr(inline, f"{name}_onnx"), load_inputs(getattr(inline, f"{name}_inputs")))
        assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(got, want, strict=True)), name
    assert [i.name for i in read_mnn_model(str(r.llm_mnn)).inputs] == LLM_IO
    assert [i.name for i in read_mnn_model(str(r.visual_mnn)).inputs] == VISUAL_IO
