"""A Qwen3-shaped decoder at real sizes (0.6B/1.7B/4B widths), written with external data, never whole in memory.

Why a second builder: the tiny one (:mod:`qnn_debug_testkit.tiny_graph`) keeps every weight in a dict and
the graph in one protobuf, which is fine at hidden 128 and impossible at hidden 2048 (a 2 GB protobuf
limit, and the model twice in memory). Here each weight is made when the graph asks for it (seeded by
its own name, so the clean and the faulty copies agree without storing anything), appended to one
``llm.onnx.data`` file and referenced from the graph by offset; the faulty copy points into the same
file. The graph itself is the tiny builder's (same node names, same faults), so every tool sees the
same torch export form at both sizes.

Sizes come from a Hugging Face ``config.json`` (``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` — real Qwen3 has head_dim 128 with
hidden 1024 and 16 heads, so head_dim is not hidden/heads — ``intermediate_size``, ``vocab_size``) or
explicit values, with no toy limits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from pydantic import BaseModel, Field

from qnn_debug import fs
from qnn_debug.errors import BadInputError

from .tiny_graph import GraphFaults, build_graph

DATA_FILE = "llm.onnx.data"
EMBED_CHUNK = 4096
INLINE_BYTES = 1024  # tensors smaller than this stay inside the graph (scalars, shapes, the fault's spike)


class Qwen3Sizes(BaseModel):
    """Sizes of a Qwen3 decoder; ``head_dim`` is explicit as in Qwen3's config (not hidden // heads)."""

    layers: int = Field(ge=1, le=256)
    hidden: int = Field(ge=16)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=2)
    intermediate: int = Field(ge=16)
    vocab: int = Field(ge=260)
    max_position: int = Field(default=4096, ge=16, le=65536)
    rope_theta: float = 1000000.0
    rms_eps: float = 1e-6
    seed: int = 0

    def check_grouped_heads(self) -> None:
        """Grouped-query attention repeats each KV head over ``heads // kv_heads`` query heads: they must divide."""
        if self.heads % self.kv_heads:
            raise BadInputError(f"{self.kv_heads} KV heads do not divide {self.heads} query heads",
                                hint="use sizes from a real config.json")

    def weight_bytes(self) -> int:
        """fp32 bytes of the ONNX decoder's weights (layers + final norm + lm_head; the embedding is an input)."""
        h, hd, f = self.hidden, self.head_dim, self.intermediate
        per_layer = (2 * h + 2 * hd + h * hd * (2 * self.heads + 2 * self.kv_heads) + 3 * h * f)
        return 4 * (self.layers * per_layer + h + self.vocab * h)


def sizes_from_hf_config(path: str | Path, *, layers: int | None = None, seed: int = 0) -> Qwen3Sizes:
    """Read a Hugging Face ``config.json`` (Qwen3/Qwen2 keys; a VL model's ``text_config`` is used)."""
    doc = fs.read_json(path, what="Hugging Face config.json")
    if not isinstance(doc, dict):
        raise BadInputError(f"{path} is not a JSON object", hint="pass the model's config.json")
    nested = doc.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else doc
    try:
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        return Qwen3Sizes(layers=layers or int(text["num_hidden_layers"]), hidden=hidden, heads=heads,
                          kv_heads=int(text.get("num_key_value_heads", heads)),
                          head_dim=int(text.get("head_dim") or hidden // heads),
                          intermediate=int(text["intermediate_size"]), vocab=int(text["vocab_size"]),
                          max_position=min(int(text.get("max_position_embeddings", 4096)), 4096),
                          rope_theta=float(text.get("rope_theta", 1000000.0)),
                          rms_eps=float(text.get("rms_norm_eps", 1e-6)), seed=seed)
    except KeyError as e:
        raise BadInputError(f"{path} has no {e.args[0]!r}", hint="pass a decoder's config.json (Qwen3, Qwen2)") from None
    except (TypeError, ValueError) as e:
        raise BadInputError(f"{path} has a bad size: {e}", hint="pass the model's unedited config.json") from None


class LazyWeights(Mapping[str, np.ndarray]):
    """Each weight made on demand, seeded by (seed, name): the same values every time, nothing kept.

    Scales as the tiny builder's (projections ~1/sqrt(fan_in), norm gains near 1, peaked lm_head)."""

    def __init__(self, cfg: Qwen3Sizes):
        self.cfg = cfg
        self.written = False  # once the data file holds every weight, later graphs only need shapes
        h, hd, f = cfg.hidden, cfg.head_dim, cfg.intermediate
        self.shapes: dict[str, tuple[int, ...]] = {"norm": (h,), "lm_head": (cfg.vocab, h)}
        for i in range(cfg.layers):
            p = f"layers.{i}"
            self.shapes.update({f"{p}.input_layernorm": (h,), f"{p}.q_proj": (cfg.heads * hd, h),
                                f"{p}.k_proj": (cfg.kv_heads * hd, h), f"{p}.v_proj": (cfg.kv_heads * hd, h),
                                f"{p}.o_proj": (h, cfg.heads * hd), f"{p}.q_norm": (hd,), f"{p}.k_norm": (hd,),
                                f"{p}.post_attention_layernorm": (h,), f"{p}.gate_proj": (f, h),
                                f"{p}.up_proj": (f, h), f"{p}.down_proj": (h, f)})

    def _rng(self, name: str) -> np.random.Generator:
        digest = hashlib.sha256(f"{self.cfg.seed}:{name}".encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little"))

    def __getitem__(self, name: str) -> np.ndarray:
        """A ``[out, in]`` weight, stored transposed (the graph's MatMul takes ``[in, out]``: no copy there)."""
        shape = self.shapes[name]
        if self.written and 4 * int(np.prod(shape)) >= INLINE_BYTES:
            # never read: the data file has it (uninitialised memory is not even touched); small ones are inline
            return np.empty(shape[::-1], np.float32).T if len(shape) == 2 else np.empty(shape, np.float32)
        rng = self._rng(name)
        if len(shape) == 1:
            return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        w = rng.standard_normal(shape[::-1], dtype=np.float32)
        w *= np.float32(1.0 / np.sqrt(shape[1]))
        if name == "lm_head":
            w *= np.float32(4.0)
        return w.T

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def embed_chunk(self, chunk: int) -> np.ndarray:
        """Embedding rows ``chunk*4096 ...`` (bf16-exact): the table is made and written a chunk at a time."""
        rows = min(EMBED_CHUNK, self.cfg.vocab - chunk * EMBED_CHUNK)
        table = self._rng(f"embed.{chunk}").standard_normal((rows, self.cfg.hidden), dtype=np.float32) * 0.5
        return (table.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        """Embedding rows of ``ids`` (what the runtime reads from ``embeddings_bf16.bin``)."""
        out = np.empty((len(ids), self.cfg.hidden), np.float32)
        for chunk in sorted({int(i) // EMBED_CHUNK for i in ids}):
            table = self.embed_chunk(chunk)
            for j, i in enumerate(ids):
                if int(i) // EMBED_CHUNK == chunk:
                    out[j] = table[int(i) - chunk * EMBED_CHUNK]
        return out

    def write_embeddings_bf16(self, path: Path) -> int:
        """``embeddings_bf16.bin`` as llmexport writes it (``[vocab, hidden]`` bfloat16, row-major), chunk by chunk."""
        written = 0
        with fs.open_new(path, what="bf16 embeddings file") as f:
            for chunk in range((self.cfg.vocab + EMBED_CHUNK - 1) // EMBED_CHUNK):
                data = (self.embed_chunk(chunk).view(np.uint32) >> 16).astype(np.uint16).tobytes()
                f.write(data)
                written += len(data)
        return written


class _DataSink:
    """Appends initializer bytes to one external data file; a name written before is pointed at again."""

    def __init__(self, f: IO[bytes], location: str):
        self.f, self.location, self.offset = f, location, 0
        self.written: dict[str, tuple[int, int]] = {}

    def __call__(self, name: str, arr: np.ndarray) -> TensorProto:
        if arr.nbytes < INLINE_BYTES and name not in self.written:
            return numpy_helper.from_array(arr, name)
        if name not in self.written:
            pad = (-self.offset) % 4096  # page-aligned: readers (ONNX Runtime) can map a tensor instead of copying it
            self.f.write(b"\0" * pad)
            self.offset += pad
            self.written[name] = (self.offset, arr.nbytes)
            self.f.write(np.ascontiguousarray(arr).data)  # a view: no bytes copy of a 1 GB lm_head
            self.offset += arr.nbytes
        offset, length = self.written[name]
        t = TensorProto(name=name, dims=list(arr.shape),
                        data_type=int(onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)))
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", self.location), ("offset", str(offset)), ("length", str(length))):
            t.external_data.add(key=k, value=v)
        return t


class SizedDecoder(BaseModel):
    """What was built: the clean graph, optional faulty copies, the shared data file and prefill inputs."""

    dir: str
    clean: str
    faulty: dict[str, str] = Field(default_factory=dict)
    data: str
    inputs: str
    sizes: Qwen3Sizes
    weight_bytes: int
    seq: int
    embeddings: str | None = None


def build_sized_decoder(out_dir: str | Path, sizes: Qwen3Sizes, *, seq: int = 128,
                        faults: Mapping[str, GraphFaults] | None = None, static_head: bool = True,
                        embeddings: bool = False) -> SizedDecoder:
    """Write ``llm.onnx`` (+ ``llm_<name>.onnx`` per fault, sharing ``llm.onnx.data``) and ``prefill.npz``;
    ``embeddings`` adds ``embeddings_bf16.bin`` (the rows ``prefill.npz`` embeds, as the runtime would).

    Peak memory is one weight tensor plus the graph without data. ``static_head`` bakes ``logits_index``
    (the last token) in, as the HTP simulator rejects the dynamic Slice on it."""
    sizes.check_grouped_heads()
    out = fs.make_dirs(out_dir, what="decoder output folder")
    if any(out.iterdir()):
        raise BadInputError(f"{out} is not empty", hint="pass a new directory for the decoder")
    weights = LazyWeights(sizes)
    ids = np.random.default_rng(sizes.seed + 1).integers(0, min(sizes.vocab, 32000), size=seq)
    feeds = _prefill(weights, ids, seq)
    built: dict[str, str] = {}
    with fs.open_new(out / DATA_FILE, what="external data file") as f:
        sink = _DataSink(f, DATA_FILE)
        for name, fault in {"": GraphFaults(), **dict(faults or {})}.items():
            path = out / (f"llm_{name}.onnx" if name else "llm.onnx")
            model = _graph(sizes, weights, seq, fault, sink, feeds["logits_index"] if static_head else None)
            with fs.open_new(path, what="decoder model") as g:
                g.write(model.SerializeToString())
            built[name] = str(path)
            del model
            weights.written = True
    if static_head:
        feeds.pop("logits_index")
    np.savez(out / "prefill.npz", **feeds)  # type: ignore[arg-type]
    np.save(out / "prefill_token_ids.npy", ids)
    if embeddings:
        weights.write_embeddings_bf16(out / "embeddings_bf16.bin")
    fs.atomic_write_text(out / "sizes.json", sizes.model_dump_json(indent=1))
    return SizedDecoder(dir=str(out), clean=built.pop(""), faulty=built, data=str(out / DATA_FILE),
                        inputs=str(out / "prefill.npz"), sizes=sizes, weight_bytes=sizes.weight_bytes(), seq=seq,
                        embeddings=str(out / "embeddings_bf16.bin") if embeddings else None)


def _graph(sizes: Qwen3Sizes, weights: LazyWeights, seq: int, faults: GraphFaults, sink: _DataSink,
           logits_index: np.ndarray | None) -> onnx.ModelProto:
    model = build_graph(sizes, weights, seq_len=seq, faults=faults, init_hook=sink)
    if logits_index is not None:
        keep = [i for i in model.graph.input if i.name != "logits_index"]
        del model.graph.input[:]
        model.graph.input.extend(keep)
        model.graph.initializer.append(numpy_helper.from_array(logits_index, "logits_index"))
    return model


def _prefill(weights: LazyWeights, ids: np.ndarray, seq: int) -> dict[str, np.ndarray]:
    mask = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), k=1)[None, None]
    return {"input_ids": weights.embed_rows(ids)[:, None, :], "attention_mask": mask,
            "position_ids": np.arange(seq, dtype=np.int32)[None, :],
            "logits_index": np.asarray([seq - 1], dtype=np.int32)}


def describe(decoder: SizedDecoder) -> dict[str, Any]:
    """A short JSON-able summary (for benchmarks and logs)."""
    return json.loads(decoder.model_dump_json())
