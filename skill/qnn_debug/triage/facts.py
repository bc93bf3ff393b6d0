"""Facts: decode what the matched lines name (OpType numbers, QNN error codes, rejected ops, a backtrace) into
sentences, and the `qnn-debug op` lookups for the ops they name."""

from __future__ import annotations

import re

from ..errors import BadInputError
from .backtrace import Frame
from .models import NextStep
from .signatures import Signature
from .weights import MAX_OP_STEPS


def decode_facts(groups: list[tuple[Signature, dict[str, str]]], category: str) -> tuple[list[str], list[NextStep]]:
    """Decode what the matched lines name: OpType numbers, QNN error codes, rejected QNN/ONNX ops."""
    from ..mnn.optypes import optype_name, qnn_mapping, source
    from ..mnn.refusals import CONDITIONS
    from .codes import code_name

    facts: list[str] = []
    ops: list[str] = []
    seen: set[str] = set()

    def add(fact: str) -> None:
        if fact not in seen:
            seen.add(fact)
            facts.append(fact)

    commit = source()["commit"][:7]
    declined: set[int] = set()  # OpTypes whose creator declined: the "registers it" reading would mislead
    order = ("mnn-refused-conversion-failed", "mnn-dont-support-type")
    for sig, g in sorted(groups, key=lambda sg: (sg[0].category != category, sg[0].id not in order)):
        if "optype" in g:
            n = int(g["optype"])
            try:
                name = optype_name(n)
            except BadInputError:
                add(f"OpType {n} is not in MNN's OpType enum at {commit} (newer/older MNN?)")
                continue
            m = qnn_mapping(n)
            if m is None:
                add(f"OpType {n} = {name}: MNN's QNN backend has no implementation at {commit}; it cannot run on the NPU")
            elif sig.id.startswith("mnn-dont-support") or sig.id == "mnn-refused-conversion-failed":
                declined.add(n)
                add(f"OpType {n} = {name}: MNN at {commit} registers {m.creator}, and that creator declined this op's form "
                    "('Don't support type')" + (f": {CONDITIONS[n]}" if n in CONDITIONS else ""))
            elif n not in declined:
                add(f"OpType {n} = {name}: MNN at {commit} registers {m.creator} (emits {', '.join(m.qnn_ops[:4])}); "
                    "if your build says 'Not registered', it predates that support or was built without it")
            ops.append(name)
        for key in ("code", "hex", "handle"):
            if key in g:
                value = int(g[key], 16) if key == "hex" else int(g[key])
                add(f"QNN error {value & 0xFFFF}" + (f" (0x{value:x})" if key == "hex" else "") + f" = {code_name(value & 0xFFFF)}")
        for key in ("op", "onnx_op", "onnx_op2", "opname"):
            if key in g:
                ops.append(g[key])
        if "node" in g and category in ("op_validation_failed_3110_0xc26", "finalize_failed_1002", "unsupported_op_not_registered"):
            add(f"node named by the log: {g['node']}")
            if sig.category_for(g) == category and (op := _op_of_node(g["node"])):
                ops.append(op)  # op_lookup_steps drops a name the lookup does not know
    return facts, op_lookup_steps(ops)


_NODE_PARTS = re.compile(r"[_/.:]+")


def _op_of_node(node: str) -> str | None:
    """The op type a QNN node name ends in, if any (MNN and the QNN converters name nodes ``<path>_<OpType>``, e.g.
    ``_layers_23_self_attn_o_proj_Linear_MatMul``); whether the lookup knows it is :func:`op_lookup_steps`' question."""
    parts = [p for p in _NODE_PARTS.split(node) if p and not p.isdigit()]
    return parts[-1] if parts else None


def op_lookup_steps(ops: list[str]) -> list[NextStep]:
    """`qnn-debug op` for each op the log names, with --probe only when that op can be probed (runs as printed)."""
    from ..ops.lookup import op_next_step

    steps: list[NextStep] = []
    for op in dict.fromkeys(ops):
        if len(steps) >= MAX_OP_STEPS:
            break
        step = op_next_step(op)
        if step is not None:
            steps.append(NextStep(tool="lookup_op_constraints", cli=step[0],
                                  why=f"the log names {op}: {step[1]}"))
    return steps


_OP_IN_FRAME = re.compile(r"\bQNN(?!Backend|CommonExecution|TensorWrapper|TensorDumper|Convertor)(?P<op>[A-Z]\w*)::on(?:Encode|Resize)")


def ops_in_frames(frames: list[Frame]) -> list[str]:
    return [m.group("op") for f in frames if (m := _OP_IN_FRAME.search(f.function))]


def frame_facts(frames: list[Frame]) -> list[str]:
    if not frames:
        return []
    known = [f for f in frames if f.known]
    top = frames[0]
    text = f"backtrace: {len(frames)} frames, top #{top.number} {top.function}"
    if known:
        text += "; known MNN frames: " + ", ".join(f"#{f.number} {f.function}" for f in known[:5])
    return [text + " (no need to ask for another backtrace)"]
