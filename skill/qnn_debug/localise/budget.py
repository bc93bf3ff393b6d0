"""The memory budget of block localisation: how many decoder blocks one session may hold, or a typed refusal.

Why a budget and not "all blocks in one session": a simulator session holds its graph's weights several
times (fp32 protobuf, QNN's fp16 copy, the HTP graph), so the whole of a 0.6B decoder took 7 GB in the
worker and 19 GB in the main process. Blocks are grouped, in order, so that each group's estimated peak
stays within ``--max-memory`` (per process); a single block that cannot fit is a :class:`MemoryBudgetError`
saying what to lower. Small models still run in one session (the session's ~1 s start-up dominates there).

The factors are measured (``bench/llm_scale.py`` prints the ratios). 0.6B width, 4 blocks of 63 MB in
one session: worker 0.69-0.75 GiB, so a simulator session's peak RSS is at most ``SIM_FACTOR`` times its
fp32 weight bytes on top of the process's own libraries. The main process holds one segment's weights at a
time (the CPU reference runs one block, or the head, at a time; the fp16 floor runs ``FLOOR_BATCH`` bytes
of weights at a time, the largest weights rounded a chunk at a time and handed to ONNX Runtime in place): 0.96 GiB with the 0.58 GiB head, so ``MAIN_FACTOR``
times the largest segment.
"""

from __future__ import annotations

import os
import re

from ..errors import BadInputError, MemoryBudgetError

MIB = 1 << 20
GIB = 1 << 30
PROCESS_BASE = 600 * MIB  # python + onnxruntime (+ the QNN libraries in the worker), measured on an empty session
SIM_FACTOR = 2.5
MAIN_FACTOR = 1.5
ACTIVATION_FACTOR = 256  # a block's activations (all tensors kept for judging) per byte of its hidden state
MIN_BUDGET = 1 * GIB
MAX_DEFAULT = 8 * GIB
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"6G"``, ``"1536M"``, ``"4GiB"`` or plain bytes → bytes."""
    m = _SIZE.match(text)
    if not m:
        raise BadInputError(f"cannot read the memory size {text!r}", hint="write it like 6G, 1536M or 4GiB")
    scale = {"": 1, "k": 1 << 10, "m": MIB, "g": GIB, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def available_bytes() -> int:
    """MemAvailable of this machine (Linux), else total RAM; 8 GiB when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return MAX_DEFAULT


def default_budget() -> int:
    """Per-process budget when none is given: a third of the free memory (two processes run, with headroom),
    at least 1 GiB and at most 8 GiB."""
    return max(MIN_BUDGET, min(MAX_DEFAULT, available_bytes() // 3))


def block_cost(weights: int, hidden_state: int) -> int:
    """Estimated peak bytes one block adds to a simulator session."""
    return int(SIM_FACTOR * weights) + ACTIVATION_FACTOR * hidden_state


def check_main(weights: list[int], names: list[str], budget: int) -> None:
    """The main process runs one segment (block, or the ops before/after the layers) at a time on ORT CPU."""
    if not weights:
        return
    worst = max(range(len(weights)), key=lambda i: weights[i])
    need = PROCESS_BASE + int(MAIN_FACTOR * weights[worst])
    if need > budget:
        raise MemoryBudgetError(
            f"the CPU reference of {names[worst]} needs about {need / GIB:.1f} GiB, over the memory budget of "
            f"{budget / GIB:.1f} GiB",
            hint=f"raise --max-memory to at least {(need + GIB - 1) // GIB}G if the machine has it"
                 + ("" if names[worst].startswith("the ops") else ", or lower --layers-per-block"),
            details={"budget_bytes": budget, "block": names[worst], "block_bytes": need})


def plan_groups(costs: list[int], budget: int, names: list[str]) -> list[list[int]]:
    """Consecutive blocks packed into groups whose summed cost fits ``budget - PROCESS_BASE``."""
    room = budget - PROCESS_BASE
    worst = max(range(len(costs)), key=lambda i: costs[i]) if costs else None
    if worst is not None and costs[worst] > room:
        need = costs[worst] + PROCESS_BASE
        raise MemoryBudgetError(
            f"{names[worst]} alone needs about {need / GIB:.1f} GiB, over the memory budget of {budget / GIB:.1f} GiB",
            hint=f"raise --max-memory to at least {(need + GIB - 1) // GIB}G if the machine has it, or lower "
                 "--layers-per-block (1 is the smallest block) or the prefill length of the inputs",
            details={"budget_bytes": budget, "block": names[worst], "block_bytes": need})
    groups: list[list[int]] = []
    used = room + 1
    for i, cost in enumerate(costs):
        if used + cost > room:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += cost
    return groups
