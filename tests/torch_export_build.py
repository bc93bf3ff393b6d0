"""Exports a toy Hugging Face folder with ``torch.onnx.export`` as users do without llmexport (exporter venv only).

``python torch_export_build.py HF_DIR FLAVOUR OUT.onnx SEQ``: ``ts`` (TorchScript, ``dynamo=False``, opset 17),
``ts_fp16`` (the same on the model cast to fp16) or ``dynamo`` (``dynamo=True``, onnxscript). The graph takes
``input_ids`` and ``attention_mask`` int64 ``[1, SEQ]`` (static: QNN needs fixed shapes) and returns ``logits``; the
mask, rotary and RMSNorm are as transformers writes them (eager attention). Editing this file changes the cache key.
"""

from __future__ import annotations

import sys

import torch
from transformers import AutoModelForCausalLM


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def main(argv: list[str]) -> int:
    hf, flavour, out, seq = argv[1], argv[2], argv[3], int(argv[4])
    model = AutoModelForCausalLM.from_pretrained(hf, attn_implementation="eager", dtype=torch.float32).eval()
    wrapped = _Logits(model)
    if flavour == "ts_fp16":
        wrapped = wrapped.half()
    ids = torch.arange(3, 3 + seq).reshape(1, seq)
    args = (ids, torch.ones_like(ids))
    names = {"input_names": ["input_ids", "attention_mask"], "output_names": ["logits"]}
    with torch.no_grad():
        if flavour in ("ts", "ts_fp16"):
            torch.onnx.export(wrapped, args, out, opset_version=17, dynamo=False, **names)
        elif flavour == "dynamo":
            torch.onnx.export(wrapped, args, out, dynamo=True, external_data=False, **names)
        else:
            raise SystemExit(f"unknown flavour {flavour}")
    print("exported", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
