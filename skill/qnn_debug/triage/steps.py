"""Next steps: the runnable commands triage prints for the chosen category, never one asking for what the log gives."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from .facts import op_lookup_steps, ops_in_frames
from .models import NextStep
from .scan import Scan
from .signatures import Signature, SignatureDB
from .weights import MAX_OP_STEPS

_T = TypeVar("_T")

_INDEX_NODE = re.compile(r"(?i)rotary|rope|gather|position|cos|sin")
# ModuleBasic's TESTERROR: max |error| over 1% of the output's max. An fp16 engine can miss that on a healthy model
# (PP-OCRv4 det's fp16 floor alone: 3%), so the line says "over 1%", not "wrong": compare against the floor decides.
_TESTERROR = "mnn-testerror"
_TESTERROR_NOTE = ("ModuleBasic's TESTERROR only says the max error passed 1% of the output's max; at fp16 a healthy "
                   "model can miss that rule too (PP-OCRv4 det's own fp16 floor: 3%), so it is no verdict: compare "
                   "against the baseline's fp16 floor decides, and says where the floor itself misses the rule")


def _llm_index_node(groups: list[tuple[Signature, dict[str, str]]], in_export: bool) -> bool:
    """A rejected node that reads positions or gathers, in an LLM export (export log, or decoder-layer names)."""
    for _sig, g in groups:
        node = g.get("node", "")
        if node and _INDEX_NODE.search(node) and (in_export or re.search(r"layers?[._]\d", node)
                                                  or "rotary" in node.lower()):
            return True
    return False


def first_per(items: list[_T], key: Callable[[_T], object]) -> list[_T]:
    """``items`` in order, keeping only the first of those that share a key."""
    seen: set[object] = set()
    kept = []
    for x in items:
        k = key(x)
        if k not in seen:
            seen.add(k)
            kept.append(x)
    return kept


def plan_next_steps(scan: Scan, groups: list[tuple[Signature, dict[str, str]]], category: str, op_steps: list[NextStep],
                in_export: bool) -> list[NextStep]:
    """Concrete `qnn-debug op` steps for the ops named, then the category's own steps (never one asking for what the
    log already gives), one step per command."""
    db = scan.db
    spec = db.categories[category]
    # Under getTensorIdx (the #4716 map miss) the op in the frames only read a tensor an earlier CPU-fallback op
    # left unmapped: its constraints are not the question, so it gets no `qnn-debug op` step.
    frame_ops = [] if any(f.known == "get-tensor-idx" for f in scan.frames) else ops_in_frames(scan.frames)
    steps = op_lookup_steps(frame_ops) + op_steps
    steps = list({s.cli: s for s in steps}.values())[:MAX_OP_STEPS]
    has_op_steps = bool(steps)
    for s in spec.next_steps:
        if scan.frames and "backtrace" in s.why:
            continue  # never ask for a backtrace the user already gave
        if has_op_steps and s.tool == "lookup_op_constraints" and s.cli is None:
            continue  # the concrete `qnn-debug op <name>` steps above replace the generic one
        steps.append(_tool_step(db, s.tool, s.cli or db.tools[s.tool], s.why))
    if category == "op_validation_failed_3110_0xc26" and _llm_index_node(groups, in_export):
        steps.insert(0, _tool_step(db, "check_llm_export", db.tools["check_llm_export"],
                                   "a Gather/rotary node of an LLM export fails validation: the usual cause is an "
                                   "index tensor quantized by smooth/omni activation quant; llm-check finds it"))
    if any(sig.id == _TESTERROR for sig, _g in groups):
        for st in steps:
            if st.tool in ("compare_runs", "build_baseline") or (st.cli or "").startswith("qnn-debug compare"):
                st.why = f"{st.why.rstrip('.')}; {_TESTERROR_NOTE}"
                break
    return first_per(steps, lambda s: s.cli)  # one step per command


def _tool_step(db: SignatureDB, tool: str, cli: str, why: str) -> NextStep:
    """A step whose line runs as printed: each ``"$NAME"`` in it is explained in ``why`` (what to set it to)."""
    names = list(dict.fromkeys(re.findall(r'"\$([A-Z_]+)"', cli)))
    settings = "; ".join(f"set {n} to {db.variables[n]}" for n in names if n in db.variables)
    return NextStep(tool=tool, cli=cli, why=f"{why.rstrip('.')} ({settings})" if settings else why)
