"""Sizes of a Qwen3-VL model: the vision encoder's, the text decoder's and what joins them.

Two presets — ``tiny`` (seconds on the HTP simulator) and ``qwen3-vl-2b`` (Qwen3-VL-2B-Instruct's widths:
vision hidden 1024, 16 heads, 24 blocks, MLP 4096, 48x48 position grid, deepstack after blocks 5/11/17,
merged to the text width 2048; text 28 layers, hidden 2048, 16/8 heads of 128, MLP 6144, M-RoPE sections
24/20/20 interleaved) — or a Hugging Face ``config.json`` (``vision_config`` + ``text_config``), with the
depths overridable so that real widths can be tested with a few blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from qnn_debug import fs
from qnn_debug.errors import BadInputError

from .sized import Qwen3Sizes

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
Preset = Literal["tiny", "qwen3-vl-2b"]


class VisionSizes(BaseModel):
    """The ViT of Qwen3-VL (``Qwen3VLVisionModel``): patch 16, temporal patch 2, 2x2 merge."""

    depth: int = Field(ge=1, le=64)
    hidden: int = Field(ge=8)
    heads: int = Field(ge=1)
    intermediate: int = Field(ge=8)
    out_hidden: int = Field(ge=8, description="the text decoder's hidden size (merger output)")
    num_grid_per_side: int = Field(ge=2, le=256, description="side of the learned position-embedding grid")
    deepstack_indexes: list[int] = Field(description="blocks whose output feeds a deepstack merger")
    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    in_channels: int = 3
    rope_theta: float = 10000.0
    ln_eps: float = 1e-6
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def patch_dim(self) -> int:
        """Width of one ``patches`` row: C*T*P*P (1536 for Qwen3-VL)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @model_validator(mode="after")
    def _check(self) -> VisionSizes:
        if self.hidden % self.heads or self.head_dim % 4:
            raise ValueError("vision heads must divide hidden, into head_dim divisible by 4 (2-D rotary)")
        if any(not 0 <= i < self.depth for i in self.deepstack_indexes):
            raise ValueError(f"deepstack_indexes {self.deepstack_indexes} outside 0..{self.depth - 1}")
        return self


class VLSizes(BaseModel):
    """A whole Qwen3-VL: vision, text (a Qwen3 decoder with M-RoPE) and the M-RoPE sections. With fewer decoder
    layers than deepstack features only the existing layers add theirs (as ``qwen3_vl_forward`` loops)."""

    vision: VisionSizes
    text: Qwen3Sizes
    mrope_section: tuple[int, int, int]

    @model_validator(mode="after")
    def _check(self) -> VLSizes:
        if sum(self.mrope_section) != self.text.head_dim // 2:
            raise ValueError(f"mrope_section {self.mrope_section} must sum to head_dim/2 = {self.text.head_dim // 2}")
        if self.vision.out_hidden != self.text.hidden:
            raise ValueError("the vision merger's output width must be the text hidden size")
        return self

    @property
    def deepstack(self) -> int:
        return len(self.vision.deepstack_indexes)


def preset(name: Preset, *, depth: int | None = None, layers: int | None = None, seed: int = 0) -> VLSizes:
    """A named size; ``depth``/``layers`` cut the vision blocks / decoder layers (deepstack indexes kept if they fit)."""
    if name == "tiny":
        vision = dict(depth=4, hidden=64, heads=4, intermediate=128, out_hidden=128, num_grid_per_side=8,
                      deepstack_indexes=[0, 1, 2])
        text = Qwen3Sizes(layers=3, hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=256, vocab=320,
                          max_position=512, rope_theta=5000000.0, seed=seed)
        section = (6, 5, 5)
    elif name == "qwen3-vl-2b":
        vision = dict(depth=24, hidden=1024, heads=16, intermediate=4096, out_hidden=2048, num_grid_per_side=48,
                      deepstack_indexes=[5, 11, 17])
        text = Qwen3Sizes(layers=28, hidden=2048, heads=16, kv_heads=8, head_dim=128, intermediate=6144,
                          vocab=151936, max_position=4096, rope_theta=5000000.0, seed=seed)
        section = (24, 20, 20)
    else:
        raise BadInputError(f"unknown VL size {name!r}", hint="use 'tiny' or 'qwen3-vl-2b', or pass a config.json")
    return _cut(VLSizes(vision=VisionSizes(**vision, seed=seed), text=text, mrope_section=section), depth, layers)


def _cut(sizes: VLSizes, depth: int | None, layers: int | None) -> VLSizes:
    v, t = sizes.vision, sizes.text
    if depth is not None:
        keep = [i for i in v.deepstack_indexes if i < depth]
        if len(keep) < len(v.deepstack_indexes):  # spread the deepstack blocks over the shorter encoder
            n = len(v.deepstack_indexes)
            keep = sorted({min(depth - 1, (k * depth) // n) for k in range(n)})
        v = v.model_copy(update={"depth": depth, "deepstack_indexes": keep})
    if layers is not None:
        t = t.model_copy(update={"layers": layers})
    return VLSizes(vision=VisionSizes(**v.model_dump()), text=t, mrope_section=sizes.mrope_section)


def vl_sizes_from_hf_config(path: str | Path, *, depth: int | None = None, layers: int | None = None,
                            seed: int = 0) -> VLSizes:
    """Read a Qwen3-VL ``config.json`` (``vision_config``, ``text_config`` with ``rope_scaling.mrope_section``)."""
    doc = fs.read_json(path, what="Hugging Face config.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("vision_config"), dict) or not isinstance(doc.get("text_config"), dict):
        raise BadInputError(f"{path} has no vision_config/text_config",
                            hint="pass a Qwen3-VL model's config.json (Qwen3VLForConditionalGeneration)")
    vc: dict[str, Any] = doc["vision_config"]
    tc: dict[str, Any] = doc["text_config"]
    try:
        heads = int(tc["num_attention_heads"])
        hidden = int(tc["hidden_size"])
        rope = tc.get("rope_scaling") or tc.get("rope_parameters") or {}
        text = Qwen3Sizes(layers=int(tc["num_hidden_layers"]), hidden=hidden, heads=heads,
                          kv_heads=int(tc.get("num_key_value_heads", heads)),
                          head_dim=int(tc.get("head_dim") or hidden // heads), intermediate=int(tc["intermediate_size"]),
                          vocab=int(tc["vocab_size"]), max_position=min(int(tc.get("max_position_embeddings", 4096)), 4096),
                          rope_theta=float(tc.get("rope_theta", rope.get("rope_theta", 5000000.0))),
                          rms_eps=float(tc.get("rms_norm_eps", 1e-6)), seed=seed)
        section = tuple(int(s) for s in rope.get("mrope_section", (24, 20, 20)))
        vision = VisionSizes(depth=int(vc["depth"]), hidden=int(vc["hidden_size"]), heads=int(vc["num_heads"]),
                             intermediate=int(vc["intermediate_size"]), out_hidden=int(vc["out_hidden_size"]),
                             num_grid_per_side=round(int(vc["num_position_embeddings"]) ** 0.5),
                             deepstack_indexes=[int(i) for i in vc.get("deepstack_visual_indexes", [])],
                             patch_size=int(vc.get("patch_size", 16)),
                             temporal_patch_size=int(vc.get("temporal_patch_size", 2)),
                             merge_size=int(vc.get("spatial_merge_size", 2)), seed=seed)
        if len(section) != 3:
            raise ValueError(f"mrope_section {section} has not three entries")
        sizes = VLSizes(vision=vision, text=text, mrope_section=(section[0], section[1], section[2]))
    except KeyError as e:
        raise BadInputError(f"{path} has no {e.args[0]!r}", hint="pass a Qwen3-VL model's unedited config.json") from None
    except (TypeError, ValueError) as e:
        raise BadInputError(f"{path} has a bad size: {e}", hint="pass a Qwen3-VL model's unedited config.json") from None
    return _cut(sizes, depth, layers)
