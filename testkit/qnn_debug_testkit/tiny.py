"""Build a tiny Qwen3-shaped llmexport folder (clean or with one injected fault) for tests and benchmarks.

The folder holds what ``llmexport.py --export mnn`` leaves behind — ``llm.mnn``, ``llm_config.json``,
``config.json``, ``export_args.json``, ``tokenizer.txt``, ``embeddings_bf16.bin`` — plus ``onnx/llm.onnx``,
the same weights as a plain ONNX graph (MatMul/Softmax attention, static prefill length) that ONNX Runtime
and the HTP simulator run. ``llm.mnn`` is made as llmexport makes it: ONNX with its custom ops → MNN's
converter → JSON edits → converter again (``qnn_debug_testkit.convert_worker``).

Faults (each on its own copy; all deterministic):
- ``unregistered_op``: layer ``fault_layer`` exported in the C4 form, so its rotary is MNN ``RoPE``
  (OpType 306), which MNN's QNN backend does not register and compilefornpu does not break on;
- ``index_quant``: 16-bit activation encodings on integer tensors (``position_ids``, the rotary Gather
  indices, the ``logits_index`` cast), as ``_propagate_quant_info`` spreads them;
- ``mul_encoding``: the SwiGLU ``gate * up`` Mul output of ``fault_layer`` takes its ``up`` operand's
  encoding (saturates: the product's range is far larger);
- ``wrong_rotary``: ``rotate_half`` without its Neg in ``fault_layer`` (a numeric bug, graph stays valid);
- ``residual_spike``: two residual channels of ``fault_layer`` pushed to 400 on the first token: harmless in fp32, but the next
  RMSNorm squares them (1.6e5 > 65504, the fp16 maximum).
The two quantization faults imply a smooth-quant style export, so they switch ``act_quant`` on.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
from pydantic import BaseModel, Field

from qnn_debug.errors import BadInputError
from qnn_debug.progress import NULL_PROGRESS, Progress

from .tiny_graph import DecoderSizes, GraphFaults, TinyQwen3Config, build_graph, make_weights, prefill_inputs
from .tiny_tokenizer import write_tokenizer

Fault = Literal["unregistered_op", "index_quant", "mul_encoding", "wrong_rotary", "residual_spike"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
FAULTS: tuple[Fault, ...] = ("unregistered_op", "index_quant", "mul_encoding", "wrong_rotary", "residual_spike")


class TinyExportRequest(BaseModel):
    """What to build: sizes, an optional fault, and the export settings the files should record."""

    config: TinyQwen3Config = Field(default_factory=TinyQwen3Config)
    fault: Fault | None = None
    fault_layer: int | None = Field(default=None, description="layer the fault goes into (default: the last)")
    act_quant: bool = Field(default=False, description="attach 16-bit activation encodings like --smooth")
    onnx_seq_len: int = Field(default=32, ge=1, le=512, description="static prefill length of onnx/llm.onnx")
    weight_bits: int = Field(default=0, description="0 = float weights; 4 or 8 = converter weight quant")


class TinyExport(BaseModel):
    """Paths of a built export folder and what was put in it."""

    dir: str
    mnn: str
    onnx: str
    config: TinyQwen3Config
    fault: Fault | None
    fault_layer: int | None
    act_quant: bool
    quantized_tensors: int
    rewritten_ops: dict[str, int]


def _calibrate(cfg: TinyQwen3Config, weights: dict[str, np.ndarray], faults: GraphFaults) -> dict[str, tuple[float, float]]:
    """min/max of every float tensor of the plain graph on a seeded prompt (what smooth quant calibrates)."""
    import onnxruntime as ort

    model = build_graph(cfg, weights, attention="onnx", seq_len=None, faults=faults)
    names = [o for n in model.graph.node for o in n.output]
    del model.graph.output[:]
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ids = list(np.random.default_rng(cfg.seed + 1).integers(0, 256, size=24))
    feeds = prefill_inputs(cfg, weights, [int(i) for i in ids])
    feeds["logits_index"] = np.asarray([0], np.int32)
    ranges: dict[str, tuple[float, float]] = {}
    for name, value in zip(names, sess.run(names, feeds), strict=True):
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and arr.size:
            ranges[name] = (float(arr.min()), float(arr.max()))
    return ranges


def build_tiny_export(out_dir: str | Path, request: TinyExportRequest | None = None,
                      progress: Progress = NULL_PROGRESS) -> TinyExport:
    """Write the export folder (``out_dir`` must be new or empty) and return its description."""
    from qnn_debug.workers import run_worker

    req = request or TinyExportRequest()
    cfg = req.config
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise BadInputError(f"{out} is not empty", hint="pass a new directory for the tiny export")
    layer = req.fault_layer if req.fault_layer is not None else cfg.layers - 1
    if not 0 <= layer < cfg.layers:
        raise BadInputError(f"fault_layer {layer} outside 0..{cfg.layers - 1}", hint="pick an existing layer")
    act_quant = req.act_quant or req.fault in ("index_quant", "mul_encoding")
    faults = GraphFaults(
        wrong_rotary_layer=layer if req.fault == "wrong_rotary" else None,
        residual_spike_layer=layer if req.fault == "residual_spike" else None,
        fused_rope_layers=[layer] if req.fault == "unregistered_op" else [],
    )
    weights = make_weights(cfg)
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    plain_faults = faults.model_copy(update={"fused_rope_layers": []})
    plain = build_graph(cfg, weights, attention="onnx", seq_len=req.onnx_seq_len, faults=plain_faults)
    onnx_path = out / "onnx" / "llm.onnx"
    onnx.save(plain, str(onnx_path))
    fused = build_graph(cfg, weights, attention="fused", seq_len=None, faults=faults)
    work = Path(tempfile.mkdtemp(prefix="qnn-debug-tiny-"))
    fused_path = work / "llm_fused.onnx"
    onnx.save(fused, str(fused_path))

    ranges = _calibrate(cfg, weights, plain_faults) if act_quant else None
    mul_fault = ([f"/layers.{layer}/mlp/Mul_output_0", f"/layers.{layer}/mlp/up_proj/MatMul_output_0"]
                 if req.fault == "mul_encoding" else None)
    try:
        result = run_worker("qnn_debug_testkit.convert_worker",
                            {"onnx": str(fused_path), "out": str(out / "llm.mnn"), "work": str(work),
                             "ranges": ranges, "index_quant": req.fault == "index_quant", "mul_from_operand": mul_fault,
                             "weight_bits": req.weight_bits},
                            timeout=300, progress=progress, what="MNN converter")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write_runtime_files(out, cfg, weights, req, act_quant)
    return TinyExport(dir=str(out), mnn=str(out / "llm.mnn"), onnx=str(onnx_path), config=cfg, fault=req.fault,
                      fault_layer=layer if req.fault else None, act_quant=act_quant,
                      quantized_tensors=int(result.get("quantized", 0)), rewritten_ops=result.get("rewritten", {}))


def _write_runtime_files(out: Path, cfg: TinyQwen3Config, weights: dict[str, np.ndarray], req: TinyExportRequest,
                         act_quant: bool) -> None:
    """bf16 embeddings, then the configs and tokenizer (:func:`write_runtime_configs`), as llmexport writes them."""
    emb = weights["embed"].astype(np.float32)
    bf16 = (emb.view(np.uint32) >> 16).astype(np.uint16)  # truncation, as torch's bfloat16 view would store
    bf16.tofile(out / "embeddings_bf16.bin")
    write_runtime_configs(out, cfg, "tiny-qwen3", quant_bit=req.weight_bits or 16, quant_block=64, smooth=act_quant,
                          c4=req.fault != "unregistered_op")


def write_runtime_configs(out: Path, cfg: DecoderSizes, source: str, *, quant_bit: int, quant_block: int,
                          smooth: bool = False, c4: bool = True) -> None:
    """llm_config.json / config.json / export_args.json / tokenizer.txt of an export folder of these sizes."""
    write_tokenizer(out / "tokenizer.txt", cfg.vocab)
    llm_config = {
        "model_type": "qwen3", "hidden_size": cfg.hidden, "layer_nums": cfg.layers, "attention_mask": "float",
        "attention_type": "full", "is_mrope": False, "max_position_embeddings": cfg.max_position,
        "key_value_shape": [2, 1, 0, cfg.kv_heads, cfg.head_dim],
        # a ChatML template, as llmexport copies a Qwen tokenizer's chat_template into llm_config.json
        "jinja": {"chat_template": CHAT_TEMPLATE, "eos": "<|im_end|>"},
    }
    (out / "llm_config.json").write_text(json.dumps(llm_config, indent=4), encoding="utf-8")
    config = {"llm_model": "llm.mnn", "llm_weight": "llm.mnn.weight", "backend_type": "cpu", "thread_num": 1,
              "precision": "low", "memory": "low", "sampler_type": "mixed", "temperature": 0.8, "top_k": 40,
              "top_p": 0.9, "tokenizer_file": "tokenizer.txt"}
    (out / "config.json").write_text(json.dumps(config, indent=4), encoding="utf-8")
    args = {"path": source, "dst_path": str(out.name), "export": "mnn", "quant_bit": quant_bit,
            "quant_block": quant_block, "sym": False, "act_bit": 16, "act_sym": False, "smooth": smooth, "omni": False,
            "generate_for_npu": True, "transformer_c4": c4, "embed_bit": 16}
    (out / "export_args.json").write_text(json.dumps(args, indent=4), encoding="utf-8")


def tiny_prefill(export: TinyExport, token_ids: list[int]) -> dict[str, np.ndarray]:
    """Inputs of ``onnx/llm.onnx`` for these tokens (embedded with the export's own weights)."""
    return prefill_inputs(export.config, make_weights(export.config), token_ids)
