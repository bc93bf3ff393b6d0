"""Qwen3-VL test models at two sizes, for the VL builder's tests and the tools' VL tests."""

from __future__ import annotations

import json
from pathlib import Path

# A Qwen3-VL-shaped Hugging Face config.json, smaller than the tiny preset's neighbour by design: other widths,
# head_dim 64, 6 vision blocks with deepstack after 1/3/4, a 12x12 position grid, four decoder layers.
SMALL_HF_CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 400,
                    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 5000000,
                    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [12, 10, 10], "rope_type": "default"}},
    "vision_config": {"model_type": "qwen3_vl", "depth": 6, "hidden_size": 128, "intermediate_size": 256, "num_heads": 2,
                      "out_hidden_size": 256, "num_position_embeddings": 144, "deepstack_visual_indexes": [1, 3, 4],
                      "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3,
                      "hidden_act": "gelu_pytorch_tanh"},
}


def write_small_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(SMALL_HF_CONFIG), encoding="utf-8")
    return path
