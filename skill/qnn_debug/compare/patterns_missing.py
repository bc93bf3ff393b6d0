"""The ``missing_op`` pattern: an op of the re-run segment that the target never ran (a dropped residual or
deepstack add, a lost scale).

A segment holds the ops whose outputs the target's dump lacks between the suspect and the nearest dumped
tensors; a plain ``.npz`` dump with ONNX names lacks exactly the tensors of an op the target's graph does not
have. Passing one operand of such an op straight through (``Add(h, ds)`` becomes ``h``) and reproducing the
target says the op is missing — more specific than "an input read as zeros", which gives the same numbers for
an Add but blames a buffer the target did fill.
"""

from __future__ import annotations

from onnx import helper

from .patterns import PatternContext, Trial, pattern_test

# ops whose absence leaves one operand as the result (x + 0, x * 1, x - 0, x / 1)
PASS_THROUGH = {"Add", "Sub", "Mul", "Div", "Sum"}


@pattern_test
def missing_ops(ctx: PatternContext) -> list[Trial]:
    """Each undumped binary op of the segment replaced by one of its operands, passed through unchanged."""
    nodes = list(ctx.run.segment.nodes)
    trials = []
    for i, node in enumerate(nodes[:-1]):  # the suspect itself is dumped: the target did run something there
        if node.op_type not in PASS_THROUGH or len([x for x in node.input if x]) != 2:
            continue
        kept_positions = (0,) if node.op_type in ("Sub", "Div") else (0, 1)
        for k in kept_positions:
            kept = node.input[k]
            if kept in ctx.run.index.initializers:
                continue  # an op that left a constant in its place is not a dropped op
            passed = helper.make_node("Identity", [kept], list(node.output), name=node.name)
            edited = [*nodes[:i], passed, *nodes[i + 1:]]
            t = ctx.trial("missing_op", f"{node.name} ({node.op_type}) missing in the target: `{kept}` passes "
                          f"through in its place", nodes=edited,
                          details={"node": node.name, "op_type": node.op_type, "passed_through": kept,
                                   "dropped_operand": node.input[1 - k]})
            if t is not None:
                trials.append(t)
    return trials

