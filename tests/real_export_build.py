"""Builds a random-weight toy Qwen3 / Qwen3-VL Hugging Face folder from a transformers config (no download).

Runs in the exporter venv (``.venv-llmexport``: torch, transformers), never in the product's: the test tier
(``tests/real_exports.py``) calls it as ``python real_export_build.py KIND MODEL OUT_DIR`` and then runs MNN's
llmexport on ``OUT_DIR``. The tokenizer is a small byte-level BPE trained offline with Qwen's special tokens
and its ChatML template, so llmexport writes a real ``tokenizer.mtok``. Editing this file changes the cache key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VL_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
CORPUS = ("hello world this is a tiny test corpus for the tokenizer of a toy model. "
          "The quick brown fox jumps over the lazy dog; 0123456789 user assistant system describe the image. ")

# Toy sizes: two per kind, differently sized and seeded, with different head counts.
TEXT_MODELS: dict[str, dict[str, Any]] = {
    "a": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512, "seed": 0},
    "b": {"hidden_size": 192, "intermediate_size": 384, "num_hidden_layers": 3, "num_attention_heads": 6,
          "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 640, "seed": 5},
}
VL_MODELS: dict[str, dict[str, Any]] = {
    "a": {"text": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512, "mrope_section": [6, 5, 5]},
          "vision": {"depth": 3, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                     "deepstack_visual_indexes": [0, 1]},
          "seed": 1},
    "b": {"text": {"hidden_size": 192, "intermediate_size": 384, "num_hidden_layers": 3, "num_attention_heads": 6,
                   "num_key_value_heads": 3, "head_dim": 32, "vocab_size": 640, "mrope_section": [6, 5, 5]},
          "vision": {"depth": 4, "hidden_size": 96, "intermediate_size": 192, "num_heads": 3,
                     "deepstack_visual_indexes": [1, 2, 3]},
          "seed": 7},
}


def _tokenizer(vocab: int, specials: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - 16, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS * 20], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_qwen3(name: str, out: Path) -> dict[str, Any]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    spec = dict(TEXT_MODELS[name])
    torch.manual_seed(spec.pop("seed"))
    tok = _tokenizer(spec["vocab_size"], SPECIALS)
    cfg = Qwen3Config(**spec, max_position_embeddings=1024, tie_word_embeddings=False,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    model = Qwen3ForCausalLM(cfg).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"kind": "qwen3", "model": name, **TEXT_MODELS[name]}


def build_qwen3_vl(name: str, out: Path) -> dict[str, Any]:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    spec = VL_MODELS[name]
    torch.manual_seed(spec["seed"])
    text = dict(spec["text"])
    section = text.pop("mrope_section")
    tok = _tokenizer(text["vocab_size"], SPECIALS + VL_SPECIALS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS + VL_SPECIALS}
    # llmexport's visual export feeds a fixed [256, 1536] patch tensor: 3 channels x temporal 2 x 16 x 16.
    vision = {**spec["vision"], "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
              "in_channels": 3, "out_hidden_size": text["hidden_size"], "num_position_embeddings": 256,
              "hidden_act": "gelu_pytorch_tanh"}
    cfg = Qwen3VLConfig(
        text_config={**text, "max_position_embeddings": 1024, "tie_word_embeddings": False,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                         "mrope_section": section, "mrope_interleaved": True}},
        vision_config=vision, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"kind": "qwen3_vl", "model": name, "token_ids": ids, **text, "mrope_section": section,
            "vision": vision}


def main(argv: list[str]) -> int:
    kind, name, out = argv[1], argv[2], Path(argv[3])
    out.mkdir(parents=True, exist_ok=True)
    info = build_qwen3(name, out) if kind == "qwen3" else build_qwen3_vl(name, out)
    (out / "toy_model.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
