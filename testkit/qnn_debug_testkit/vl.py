"""Build a Qwen3-VL llmexport folder (vision encoder + M-RoPE decoder, clean or with one injected fault).

The folder holds what ``llmexport.py --export mnn`` writes for ``qwen3_vl`` — ``visual.mnn``, ``llm.mnn`` (each
with its ``.weight``), ``config.json`` (with the ``mllm`` block), ``llm_config.json`` (``is_visual``,
``is_mrope``, ``has_deepstack``, image size/mean/norm, vision token ids, ``num_grid_per_side``),
``export_args.json``, ``tokenizer.txt``, ``embeddings_bf16.bin`` — plus, under ``onnx/``, the same weights as
plain ONNX graphs at a static length for ONNX Runtime and the HTP simulator (``visual.onnx``, ``llm.onnx``)
and their inputs (``visual_inputs.npz``: an image as MNN's runtime feeds it; ``llm_inputs.npz``: a prompt
holding that image, its embeddings and deepstack features taken from the *clean* encoder, so a decoder
fault is seen alone). ``generate_llm_qnn.py`` picks the VL IO shapes from the folder name: give it one
with "Qwen" and "VL" in it (e.g. ``Qwen3-VL-tiny``) unless you test a renamed folder.

Faults (each in one block or layer, ``fault_layer``: by default the last vision block — after every deepstack
block, so ``deepstack_feature`` stays clean — or decoder layer 0; all deterministic):
- ``vision_rotary_swapped``: that vision block reads the 2-D rotary rows as (w, h);
- ``vision_mask_not_copied``: that vision block's attention adds a zero mask (the buffer never written;
  visible because the image has two temporal groups, whose mask is block-diagonal);
- ``mrope_chunked``: that decoder layer takes M-RoPE sections in Qwen2-VL's contiguous chunks instead of
  Qwen3-VL's interleave (text-only prompts, whose three rows are equal, cannot see it);
- ``deepstack_dropped``: that decoder layer (one of the first k) skips its deepstack add;
- ``index_quant``: 16-bit activation encodings on the integer tensors of both ``.mnn`` files (``idx_tensor``,
  both ``position_ids``, every Gather index), as smooth-quant's propagation spreads them;
- ``vision_unregistered_op``: the encoder repeats its position embedding with a ``Tile`` (as ports of the Hugging
  Face encoder do): same numbers, but an op without a QNN creator inside the encoder's NPU segment.
Real sizes (``size="qwen3-vl-2b"`` or a ``hf_config``) write weights into ``.onnx.data`` files one tensor at a
time (never the model twice in memory); ``mnn=False`` skips MNN's converter for them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import numpy_helper
from pydantic import BaseModel, Field

from qnn_debug import fs
from qnn_debug.errors import BadInputError
from qnn_debug.llm.check_vl import QWEN3_MIN_PIXELS
from qnn_debug.progress import NULL_PROGRESS, Progress

from .sized import LazyWeights, _DataSink
from .tiny import CHAT_TEMPLATE
from .tiny_graph import VLText, build_graph
from .tiny_tokenizer import PIECES, SPECIALS, write_tokenizer
from .vl_inputs import decoder_inputs, prompt_ids, synthetic_frames, vision_inputs, vision_token_ids
from .vl_sizes import VISION_TOKENS, Preset, VLSizes, preset, vl_sizes_from_hf_config
from .vl_vision import VisionFaults, VisionWeights, build_vision_graph

VLFault = Literal["vision_rotary_swapped", "vision_mask_not_copied", "mrope_chunked", "deepstack_dropped",
                  "index_quant", "vision_unregistered_op"]
VL_FAULTS: tuple[VLFault, ...] = ("vision_rotary_swapped", "vision_mask_not_copied", "mrope_chunked",
                                  "deepstack_dropped", "index_quant", "vision_unregistered_op")
VISION_FAULTS = ("vision_rotary_swapped", "vision_mask_not_copied")
DECODER_FAULTS = ("mrope_chunked", "deepstack_dropped")


class VLExportRequest(BaseModel):
    """What to build: sizes (a preset or a Hugging Face config.json), the test image, an optional fault."""

    size: Preset = "tiny"
    hf_config: str | None = Field(default=None, description="a Qwen3-VL config.json (overrides size)")
    vision_depth: int | None = Field(default=None, ge=1, description="cut the vision encoder to this many blocks")
    text_layers: int | None = Field(default=None, ge=1, description="cut the decoder to this many layers")
    image_grid: tuple[int, int] = Field(default=(8, 8), description="image height, width in 16-px patches (even)")
    frames: int = Field(default=2, ge=1, le=8, description="temporal groups of the test image (2: block mask)")
    fault: VLFault | None = None
    fault_layer: int | None = Field(default=None, description="vision block / decoder layer of the fault "
                                    "(default: the last vision block, after every deepstack block; decoder layer 0, where a "
                                    "shared rotary's or the first deepstack add's fault starts)")
    mnn: bool = Field(default=True, description="convert both graphs with MNN's converter (visual.mnn, llm.mnn)")
    weight_bits: int = Field(default=0, description="0 = float weights; 4 or 8 = converter weight quant")
    external_data: bool | None = Field(default=None, description="weights in onnx/*.onnx.data, written one tensor at "
                                       "a time (default: when the weights exceed 256 MiB)")
    seed: int = 0


class VLExport(BaseModel):
    """Paths of a built folder and what was put in it."""

    dir: str
    visual_mnn: str | None
    llm_mnn: str | None
    visual_onnx: str
    llm_onnx: str
    visual_inputs: str
    llm_inputs: str
    sizes: VLSizes
    fault: VLFault | None
    fault_layer: int | None
    image_size: tuple[int, int] = Field(description="test image height, width in pixels")
    vision_seq: int
    image_tokens: int
    prompt_tokens: int
    quantized_tensors: dict[str, int] = Field(default_factory=dict)
    weight_bytes: dict[str, int] = Field(default_factory=dict)
    folder_name_matches: bool = Field(description="the folder name holds 'Qwen' and 'VL', as generate_llm_qnn.py "
                                      "needs to pick the VL IO shapes")


class _TextWeights(LazyWeights):
    """The decoder's weights with an lm_head peaked on printable tokens (as the tiny builder's): greedy text from
    MNN's runtime stays valid UTF-8 and looks like text, so a divergence reads as one."""

    def __getitem__(self, name: str) -> np.ndarray:
        w = super().__getitem__(name)
        if name == "lm_head":
            first_piece = 256 + len(SPECIALS) + len(VISION_TOKENS)
            t = np.arange(self.cfg.vocab)
            printable = ((t >= 32) & (t < 127)) | ((t >= first_piece) & (t < first_piece + len(PIECES)))
            w *= np.where(printable, 1.0, 0.25).astype(np.float32)[:, None]
        return w


def _sizes(req: VLExportRequest) -> VLSizes:
    if req.hf_config:
        return vl_sizes_from_hf_config(req.hf_config, depth=req.vision_depth, layers=req.text_layers, seed=req.seed)
    return preset(req.size, depth=req.vision_depth, layers=req.text_layers, seed=req.seed)


def _fault_layer(req: VLExportRequest, sizes: VLSizes) -> int | None:
    if req.fault is None or req.fault in ("index_quant", "vision_unregistered_op"):
        return None
    if req.fault in VISION_FAULTS:
        layer, top = (req.fault_layer if req.fault_layer is not None else sizes.vision.depth - 1), sizes.vision.depth
    elif req.fault == "deepstack_dropped":
        layer, top = (req.fault_layer if req.fault_layer is not None else 0), min(sizes.deepstack, sizes.text.layers)
    else:
        layer, top = (req.fault_layer if req.fault_layer is not None else 0), sizes.text.layers
    if not 0 <= layer < top:
        raise BadInputError(f"fault_layer {layer} outside 0..{top - 1} for {req.fault}",
                            hint="pick a vision block for vision faults, one of the first deepstack layers for "
                                 "deepstack_dropped, a decoder layer for mrope_chunked")
    return layer


def _rotary_inline(sink: _DataSink | None) -> Callable[[str, np.ndarray], onnx.TensorProto] | None:
    """The converter's source keeps the rotary tables inline: MNN's converter folds constants through their Gathers
    and aborts (std::out_of_range) when those tables sit in external data (seen with MNN 3.6's converter)."""
    if sink is None:
        return None
    return lambda name, arr: numpy_helper.from_array(arr, name) if name.startswith("rotary.") else sink(name, arr)


def _write(model: onnx.ModelProto, path: Path) -> str:
    with fs.open_new(path, what="ONNX model") as f:
        f.write(model.SerializeToString())
    return str(path)


def _ort_run(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in sess.run(None, feeds)]


def build_vl_export(out_dir: str | Path, request: VLExportRequest | None = None,
                    progress: Progress = NULL_PROGRESS) -> VLExport:
    """Write the folder (``out_dir`` must be new or empty) and return its description."""
    from qnn_debug.workers import run_worker

    req = request or VLExportRequest()
    sizes = _sizes(req)
    v, t = sizes.vision, sizes.text
    layer = _fault_layer(req, sizes)
    gh, gw = req.image_grid
    if gh < 2 or gw < 2 or gh % v.merge_size or gw % v.merge_size:
        raise BadInputError(f"image_grid {req.image_grid} must be even and at least 2x2 patches",
                            hint="e.g. 8,8 (a 128x128 image)")
    out = fs.make_dirs(out_dir, what="VL export folder")
    if any(out.iterdir()):
        raise BadInputError(f"{out} is not empty", hint="pass a new directory for the VL export")
    onnx_dir = fs.make_dirs(out / "onnx", what="onnx folder")
    vw, tw = VisionWeights(v), _TextWeights(t)
    big = req.external_data if req.external_data is not None else tw.cfg.weight_bytes() + vw.weight_bytes() > 256 * 2**20
    vfaults = VisionFaults(rotary_swapped_block=layer if req.fault == "vision_rotary_swapped" else None,
                           mask_dropped_block=layer if req.fault == "vision_mask_not_copied" else None,
                           tiled_pos_embed=req.fault == "vision_unregistered_op")
    vl = VLText(mrope_section=sizes.mrope_section, deepstack=sizes.deepstack,
                chunked_layers=[layer] if req.fault == "mrope_chunked" and layer is not None else [],
                deepstack_dropped_layers=[layer] if req.fault == "deepstack_dropped" and layer is not None else [])
    pixels = synthetic_frames(req.frames * v.temporal_patch_size, gh * v.patch_size, gw * v.patch_size, req.seed)
    vis_in = vision_inputs(v, pixels)
    seq = vis_in["patches"].shape[0]
    work = Path(tempfile.mkdtemp(prefix="qnn-debug-vl-"))
    try:
        with progress.stage("write ONNX graphs", total=None):
            vdata = fs.open_new(onnx_dir / "visual.onnx.data", what="external data") if big else None
            tdata = fs.open_new(onnx_dir / "llm.onnx.data", what="external data") if big else None
            try:
                vsink = _DataSink(vdata, "visual.onnx.data") if vdata else None
                tsink = _DataSink(tdata, "llm.onnx.data") if tdata else None
                visual_onnx = _write(build_vision_graph(v, vw, seq_len=seq, faults=vfaults, init_hook=vsink),
                                     onnx_dir / "visual.onnx")
                clean_visual = visual_onnx
                if req.fault in VISION_FAULTS:
                    clean_visual = _write(build_vision_graph(v, vw, seq_len=seq, init_hook=vsink), onnx_dir / "visual_clean.onnx")
                if vdata:
                    vdata.flush()
                image_embeds, deep = _ort_run(clean_visual, vis_in)[:2]
                if clean_visual != visual_onnx:
                    Path(clean_visual).unlink()
                tokens = prompt_ids(image_embeds.shape[0], t.vocab)
                llm_in = decoder_inputs(tokens, tw, image_embeds, deep, (req.frames, gh, gw), v.merge_size)
                llm_onnx = _write(build_graph(t, tw, seq_len=len(tokens), vl=vl, init_hook=tsink), onnx_dir / "llm.onnx")
                tw.written = big  # the data file holds every big weight: later graphs only need shapes
                if req.mnn:
                    vis_mnn_src = _write(build_vision_graph(v, vw, faults=vfaults, init_hook=vsink), onnx_dir / "visual_mnn.onnx")
                    fused = build_graph(t, tw, attention="fused", seq_len=None, init_hook=_rotary_inline(tsink),
                                        vl=vl.model_copy(update={"deepstack_seq": 1}))
                    llm_mnn_src = _write(fused, onnx_dir / "llm_mnn.onnx")
            finally:
                for f in (vdata, tdata):
                    if f is not None:
                        f.close()
        np.savez(onnx_dir / "visual_inputs.npz", **vis_in)  # type: ignore[arg-type]
        np.savez(onnx_dir / "llm_inputs.npz", **llm_in)  # type: ignore[arg-type]
        quantized: dict[str, int] = {}
        if req.mnn:
            for name, src in (("visual", vis_mnn_src), ("llm", llm_mnn_src)):
                result = run_worker("qnn_debug_testkit.convert_worker",
                                    {"onnx": src, "out": str(out / f"{name}.mnn"), "work": str(work / name),
                                     "ranges": None, "index_quant": req.fault == "index_quant",
                                     "mul_from_operand": None, "weight_bits": req.weight_bits},
                                    timeout=1800 if big else 300, progress=progress, what="MNN converter")
                quantized[name] = int(result.get("quantized", 0))
                Path(src).unlink()
        _write_runtime_files(out, sizes, req, tw, (gh * v.patch_size, gw * v.patch_size))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    name = out.resolve().name
    return VLExport(dir=str(out), visual_mnn=str(out / "visual.mnn") if req.mnn else None,
                    llm_mnn=str(out / "llm.mnn") if req.mnn else None, visual_onnx=visual_onnx, llm_onnx=llm_onnx,
                    visual_inputs=str(onnx_dir / "visual_inputs.npz"), llm_inputs=str(onnx_dir / "llm_inputs.npz"),
                    sizes=sizes, fault=req.fault, fault_layer=layer,
                    image_size=(gh * v.patch_size, gw * v.patch_size), vision_seq=seq,
                    image_tokens=int(image_embeds.shape[0]), prompt_tokens=len(tokens), quantized_tensors=quantized,
                    weight_bytes={"visual": vw.weight_bytes(), "llm": t.weight_bytes()},
                    folder_name_matches="Qwen" in name and "VL" in name)


def llm_config(sizes: VLSizes, image_hw: tuple[int, int]) -> dict[str, Any]:
    """``llm_config.json`` as llmexport writes it for qwen3_vl (decoder keys, then ``Qwen3Vision``'s)."""
    t, v = sizes.text, sizes.vision
    ids = vision_token_ids()
    unit = v.patch_size * v.merge_size
    return {
        "model_type": "qwen3_vl", "hidden_size": t.hidden, "layer_nums": t.layers, "attention_mask": "float",
        "attention_type": "full", "is_mrope": True, "mrope_axes": 3,
        "key_value_shape": [2, 1, 0, t.kv_heads, t.head_dim],
        "is_visual": True, "image_mean": [127.5, 127.5, 127.5], "image_norm": [1 / 127.5] * 3,
        # Qwen3Vision writes image_min_pixels 65536; a smaller test image lowers it to its own pixel count, so that
        # the runtime keeps it at its size (the resize rule enlarges anything below the minimum)
        "image_size": max(image_hw), "image_size_unit": unit,
        "image_min_pixels": min(QWEN3_MIN_PIXELS, image_hw[0] * image_hw[1]),
        "image_max_pixels": 16777216, "vision_start": ids["vision_start"], "vision_end": ids["vision_end"],
        "image_pad": ids["image_pad"], "num_grid_per_side": v.num_grid_per_side, "has_deepstack": True,
        "max_position_embeddings": t.max_position,
        "jinja": {"chat_template": CHAT_TEMPLATE, "eos": "<|im_end|>"},
    }


def _write_runtime_files(out: Path, sizes: VLSizes, req: VLExportRequest, tw: LazyWeights,
                         image_hw: tuple[int, int]) -> None:
    tw.write_embeddings_bf16(out / "embeddings_bf16.bin")
    write_tokenizer(out / "tokenizer.txt", sizes.text.vocab, VISION_TOKENS)
    fs.atomic_write_text(out / "llm_config.json", json.dumps(llm_config(sizes, image_hw), indent=4))
    config = {"llm_model": "llm.mnn", "llm_weight": "llm.mnn.weight", "backend_type": "cpu", "thread_num": 1,
              "precision": "low", "memory": "low", "sampler_type": "mixed", "temperature": 0.8, "top_k": 40,
              "top_p": 0.9, "tokenizer_file": "tokenizer.txt",
              "mllm": {"backend_type": "cpu", "thread_num": 1, "precision": "normal", "memory": "low"}}
    fs.atomic_write_text(out / "config.json", json.dumps(config, indent=4))
    args = {"path": "Qwen3-VL-test", "dst_path": out.name, "export": "mnn", "quant_bit": req.weight_bits or 16,
            "quant_block": 64, "sym": False, "act_bit": 16, "act_sym": False, "smooth": req.fault == "index_quant",
            "omni": False, "generate_for_npu": True, "transformer_c4": False, "embed_bit": 16,
            "visual_quant_bit": req.weight_bits or 16, "visual_quant_block": None, "visual_sym": False}
    fs.atomic_write_text(out / "export_args.json", json.dumps(args, indent=4))


def load_inputs(path: str | Path) -> dict[str, np.ndarray]:
    """The inputs a build saved (``onnx/visual_inputs.npz`` / ``onnx/llm_inputs.npz``)."""
    with np.load(str(path)) as z:
        return {k: np.asarray(z[k]) for k in z.files}
