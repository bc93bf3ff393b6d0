"""The memory budget of ``llm-text``: what one ``MNN.llm`` worker is expected to need, or a typed refusal.

Why: at 0.6B size and more the runtime's worker is the process that grows (the tool's own process only
reads the worker's answer and, for a comparison, a few MB of logits), so the budget (``--max-memory``, per
process, as for ``localise-blocks``) is checked twice: before the worker starts, from the export's files,
and while it runs, by the worker's own watchdog (:mod:`qnn_debug.workers.entry`), which stops it with the
same typed error should the estimate be wrong.

The estimate: the process itself (python, numpy and the MNN wheel), ``WEIGHT_FACTOR`` times
``llm.mnn.weight`` (the file read, plus the CPU backend's repacked copy of the 4-bit weights), the KV cache
of the prompt (at most one token per byte of the chat-templated prompt) and the generated tokens in fp32,
and the logits rows the worker keeps (one row of ``vocab`` floats per step: ``MNN.llm``'s ``forward``
returns the last position only, never prompt × vocab). The embedding table stays on disk (the runtime
reads the rows it needs from ``embeddings_bf16.bin``). Measured with ``bench/llm_text_scale.py`` at 0.6B
size (28 layers, 362 MiB of 4-bit ``llm.mnn.weight``, 16 tokens after a 54-token prompt): worker peak
708 MiB = 1.96x the weight file including the process itself; a 2-layer export's worker: 52 MiB. The
estimate (834 MiB there) stays above what was measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MemoryBudgetError

MIB = 1 << 20
GIB = 1 << 30
PROCESS_BASE = 64 * MIB  # python + numpy + MNN wheel with a loaded tokenizer (52 MiB on a 2-layer export)
WEIGHT_FACTOR = 2.0
TEMPLATE_TOKENS = 64  # the chat template's own tokens around the prompt


def kv_bytes_per_token(llm_config: dict[str, Any] | None) -> int:
    """fp32 K and V of every layer for one token, from llm_config.json (``layer_nums``, ``key_value_shape``)."""
    cfg = llm_config or {}
    try:
        layers = int(cfg.get("layer_nums") or 0)
        shape = [int(x) for x in cfg.get("key_value_shape") or []]
    except (TypeError, ValueError):
        return 0
    if layers <= 0 or len(shape) < 5:
        return 0
    return 2 * layers * shape[3] * shape[4] * 4


def estimate(weight_bytes: int, kv_per_token: int, vocab: int, new_tokens: int, prompt_bytes: int) -> int:
    """Expected peak RSS of one MNN.llm worker, in bytes."""
    tokens = prompt_bytes + TEMPLATE_TOKENS + new_tokens
    return PROCESS_BASE + int(WEIGHT_FACTOR * weight_bytes) + kv_per_token * tokens + 2 * 4 * vocab * new_tokens


def check(export_dir: str, weight: Path, llm_config: dict[str, Any] | None, vocab: int, new_tokens: int,
          prompt_bytes: int, budget: int) -> int:
    """The worker's estimate, or a :class:`MemoryBudgetError` saying what to raise or lower."""
    weight_bytes = weight.stat().st_size if weight.is_file() else 0
    need = estimate(weight_bytes, kv_bytes_per_token(llm_config), vocab, new_tokens, prompt_bytes)
    if need > budget:
        raise MemoryBudgetError(
            f"MNN's LLM runtime on {export_dir} needs about {need / GIB:.2f} GiB ({weight_bytes / MIB:.0f} MiB of "
            f"llm.mnn.weight), over the memory budget of {budget / GIB:.2f} GiB",
            hint=f"raise --max-memory to at least {max(1, -(-need // GIB))}G if the machine has it, or export the "
                 "model with fewer weight bits (llmexport --quant_bit 4)",
            details={"budget_bytes": budget, "need_bytes": need, "weight_bytes": weight_bytes})
    return need


def hint(budget: int) -> str:
    """The watchdog's hint when the worker outgrows the budget at run time."""
    return (f"raise --max-memory above {budget / GIB:.1f}G if the machine has it, or lower --max-new-tokens "
            "or the prompt length")
