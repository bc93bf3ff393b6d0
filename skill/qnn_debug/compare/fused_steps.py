"""Next steps for a fused activation the target dropped (``fused_activation_dropped``): ``fix`` first, since it
writes the model with the activation kept out of the fusion (and its ``.mnn``) and proves it; the op probe after it
only says whether QNN accepts the op, which it does — the bug is MNN's translation of the fused flag."""

from __future__ import annotations

import re

from ..next_step import NextStep, step
from .schema import CompareResult

FIXABLE = {"Relu"}  # what `fix` rewrites (Relu as Max(x, 0)); other activations are named without the fix step


def fused_activation(r: CompareResult) -> tuple[str, str] | None:
    """(model node, activation type) of the activation a fused target op covers at the first failing op."""
    ff = r.first_failing
    if ff is None or ff.fused is None:
        return None
    for entry in ff.fused.model_nodes:
        m = re.fullmatch(r"(.+) \(([A-Za-z0-9_]+)\)", entry)
        if m and m.group(2) in FIXABLE:
            return m.group(1), m.group(2)
    return None


def dropped_activation_steps(r: CompareResult, rest: list[NextStep]) -> list[NextStep]:
    """``rest`` (the usual real-bug steps) with the fix step first when ``fix`` can write it."""
    from .steps import THIS_RESULT

    ff = r.first_failing
    found = fused_activation(r)
    if r.verdict.pattern != "fused_activation_dropped" or ff is None or found is None or ff.fused is None:
        return rest
    node, kind = found
    host = ("; add --option mnn_build_dir=... --option qnn_lib_dir=... to prove it on a host MNN build with the QNN "
            "backend" if r.target_kind == "mnn-dump" or "host" in r.target else "")
    fix = step("fix_and_prove", ["fix", THIS_RESULT],
               f"The target's {ff.fused.op_type} {ff.fused.op or ''} lost the {kind} ({node}) fused into it: write the "
               f"model with {node} as Max(x, 0) (the same values; MNN's converter keeps it as its own op, out of the "
               f"fusion) and its .mnn beside yours, and prove it on MNN CPU{host}; the op probe below only says "
               f"whether QNN accepts {ff.op_type or 'the op'}, not whether MNN kept the activation.")
    return [fix, *rest]
