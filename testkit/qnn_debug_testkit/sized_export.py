"""An llmexport folder at real sizes: ``llm.mnn`` + 4-bit block-quantised ``llm.mnn.weight``, bf16 embeddings.

Why: ``llm-text`` and ``llm-check`` must be tried on what users port (Qwen3-0.6B: hidden 1024, 28 layers,
vocab 151936), not only on the tiny export. The folder is made the way llmexport's converter path makes
it: the decoder as ONNX with llmexport's custom ``FusedAttention`` op (graph of :mod:`.tiny_graph`, weights
of :mod:`.sized`, written one tensor at a time into external data), then MNN's converter with llmexport's
flags (``--allowCustomOp --transformerFuse --saveExternalData --weightQuantBits 4 --weightQuantBlock 64``,
asymmetric), the JSON edit of the custom ops and the converter again (:mod:`.convert_worker`, in a worker).

Memory: this process never holds more than one weight tensor (the graph is built lazily, the embedding
table chunk by chunk); the converter process reads the fp32 ONNX weights once (its peak RSS is returned
as ``convert_peak_rss``). The fp32 ONNX is scratch and is removed once ``llm.mnn`` is written.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from qnn_debug import fs
from qnn_debug.errors import BadInputError
from qnn_debug.progress import NULL_PROGRESS, Progress

from .sized import DATA_FILE, LazyWeights, Qwen3Sizes, _DataSink
from .tiny import write_runtime_configs
from .tiny_graph import GraphFaults, build_graph

QUANT_BLOCK = 64  # llmexport's default --quant_block
SCRATCH_DIR = ".fp32-onnx"  # inside the output folder while converting (same disk as the export), then removed


class SizedExport(BaseModel):
    """What was written, and what the conversion cost."""

    dir: str
    mnn: str
    weight: str = Field(description="llm.mnn.weight")
    embeddings: str
    sizes: Qwen3Sizes
    weight_bits: int
    quant_block: int
    fp32_weight_bytes: int = Field(description="fp32 bytes of the decoder's weights (what the converter read)")
    mnn_weight_bytes: int = Field(description="size of llm.mnn.weight")
    embedding_bytes: int
    convert_peak_rss: int = Field(description="peak RSS of the converter process (VmHWM)")
    onnx_s: float = Field(description="seconds to write the fp32 ONNX with external data")
    convert_s: float = Field(description="seconds in MNN's converter (three passes)")


def build_sized_export(out_dir: str | Path, sizes: Qwen3Sizes, *, weight_bits: Literal[4, 8] = 4,
                       quant_block: int = QUANT_BLOCK, faults: GraphFaults | None = None,
                       progress: Progress = NULL_PROGRESS) -> SizedExport:
    """Write the export folder (``out_dir`` new or empty); the fp32 ONNX is written and converted in scratch."""
    from qnn_debug.workers import run_worker

    sizes.check_grouped_heads()
    if quant_block < 0 or (quant_block and sizes.hidden % quant_block):
        raise BadInputError(f"quant block {quant_block} does not divide hidden {sizes.hidden}",
                            hint="use 0 (one scale per channel), 32, 64 or 128")
    out = fs.make_dirs(out_dir, what="export output folder")
    if any(out.iterdir()):
        raise BadInputError(f"{out} is not empty", hint="pass a new directory for the export")
    weights = LazyWeights(sizes)
    work = out / SCRATCH_DIR
    work.mkdir()
    try:
        t0 = time.perf_counter()
        onnx_path = work / "llm.onnx"
        with fs.open_new(work / DATA_FILE, what="external data file") as f:
            model = build_graph(sizes, weights, attention="fused", seq_len=None, faults=faults,
                                init_hook=_DataSink(f, DATA_FILE))
        with fs.open_new(onnx_path, what="decoder model") as g:
            g.write(model.SerializeToString())
        del model
        t1 = time.perf_counter()
        result = run_worker("qnn_debug_testkit.convert_worker",
                            {"onnx": str(onnx_path), "out": str(out / "llm.mnn"), "work": str(work), "ranges": None,
                             "index_quant": False, "mul_from_operand": None, "weight_bits": weight_bits,
                             "quant_block": quant_block},
                            log_path=out / "convert.log", timeout=7200, progress=progress, what="MNN converter")
        t2 = time.perf_counter()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emb = weights.write_embeddings_bf16(out / "embeddings_bf16.bin")
    write_runtime_configs(out, sizes, "sized-qwen3", quant_bit=weight_bits, quant_block=quant_block)
    fs.atomic_write_text(out / "sizes.json", sizes.model_dump_json(indent=1))
    weight = out / "llm.mnn.weight"
    return SizedExport(dir=str(out), mnn=str(out / "llm.mnn"), weight=str(weight),
                       embeddings=str(out / "embeddings_bf16.bin"), sizes=sizes, weight_bits=weight_bits,
                       quant_block=quant_block, fp32_weight_bytes=sizes.weight_bytes(),
                       mnn_weight_bytes=weight.stat().st_size, embedding_bytes=emb,
                       convert_peak_rss=int(result.get("peak_rss") or 0), onnx_s=round(t1 - t0, 2),
                       convert_s=round(t2 - t1, 2))
