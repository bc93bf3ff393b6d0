"""How localise-blocks groups its block jobs for the engine, at the proportions of real widths: the LM head (1.24 GB
of fp32 at Qwen3-1.7B width, 0.62 GB at 0.6B) must not size the layers' jobs, or the node's budget holds one job at
a time and the cores sit idle (measured: a 1.7B x 28 run with --max-memory 4G ran its layer jobs one by one)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from qnn_debug.localise import block_jobs
from qnn_debug.localise.budget import GIB, MIB, PROCESS_BASE
from qnn_debug.localise.cut import Block

WIDTHS = {  # (layer weights, head weights, hidden state bytes at prefill 128)
    "0.6b": (60 * MIB, 593 * MIB, 128 * 1024 * 4),
    "1.7b": (192 * MIB, 1187 * MIB, 128 * 2048 * 4),
}


def _cut(layers: int, layer_bytes: int, head_bytes: int, hidden: int) -> Any:
    """A cut of ``layers`` decoder layers, then the ops after them (norm and head); each block's "positions" is its
    weight bytes, read back by the patched ``_weights_of``."""
    blocks = [Block(i, i, [layer_bytes], ["h"], ["h"]) for i in range(layers)]
    blocks.append(Block(layers, layers, [head_bytes], ["h"], ["logits"], label=f"after layer {layers - 1}"))
    return SimpleNamespace(sent=list(range(len(blocks))), ref_blocks=blocks, tgt_blocks=blocks,
                           values={"h": np.zeros(hidden // 4, np.float32)}, target=SimpleNamespace(model=None))


@pytest.mark.parametrize("width", sorted(WIDTHS))
@pytest.mark.parametrize(("budget_gib", "slots"), [(4, 2), (6, 2), (8, 4)])
def test_layer_jobs_fit_side_by_side_within_the_budget(monkeypatch: pytest.MonkeyPatch, width: str,
                                                       budget_gib: int, slots: int) -> None:
    monkeypatch.setattr(block_jobs, "_weights_of", lambda model, positions: positions[0])
    layer_bytes, head_bytes, hidden = WIDTHS[width]
    cut = _cut(28, layer_bytes, head_bytes, hidden)
    budget = budget_gib * GIB
    groups, memory = block_jobs.plan(cut, budget, slots)
    head = len(cut.sent) - 1
    assert [head] in groups  # the head alone
    layer_memory = [m for g, m in zip(groups, memory, strict=True) if head not in g]
    assert sorted(i for g in groups for i in g) == list(range(len(cut.sent)))  # every block once, in order
    assert all(g == list(range(g[0], g[-1] + 1)) for g in groups)
    # `slots` layer jobs at once fit the node's budget, so every core has work
    assert max(layer_memory) * slots <= budget, (groups, memory)
    assert len(layer_memory) >= 2 * slots
    assert max(memory) <= budget


def test_one_worker_packs_as_many_layers_as_a_process_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_jobs, "_weights_of", lambda model, positions: positions[0])
    cut = _cut(28, *WIDTHS["1.7b"])
    groups, memory = block_jobs.plan(cut, 4 * GIB, 1)
    assert max(memory) <= 4 * GIB and len(groups) < 28  # several layers per session
    assert min(memory) >= PROCESS_BASE
