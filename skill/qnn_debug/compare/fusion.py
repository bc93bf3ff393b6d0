"""Name the op that ran: when the target's op is a fusion of several model nodes, say so.

MNN's converter fuses ConvTranspose + Add + BatchNormalization + Relu into one ``Deconvolution`` (Convolution
likewise), and QNN EP fuses node units; the tensor a comparison localises is then the output of an op the
source model does not have. ``first_failing`` keeps the reference tensor, but names the target's op (its name,
type and the target's tensor name, e.g. ``t2``) and lists the model nodes it covers, so the next step looks up
the op that really ran (``Deconvolution``, not ``Relu``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..runstore import Run
from .localise import OpNode, ops_behind
from .schema import FirstFailing, FusedOp


def covered_nodes(ops: list[OpNode], tensor: str, seen: Iterable[str]) -> list[OpNode]:
    """Model ops between the tensors the target exposes and ``tensor``: its producer, and every producer
    upstream whose output the target does not hold (they ran inside the same target op)."""
    producer = {o: op for op in ops for o in op.outputs}
    return ops_behind(producer, [tensor], set(seen) - {tensor})


def name_target_op(first: FirstFailing, target: Run, ops: list[OpNode], seen: Iterable[str]) -> FirstFailing:
    """``first`` with the target's own op when it differs from the model's (a fused op), else unchanged."""
    own = first.observed_as or first.tensor
    if not target.has(own):
        return first
    rec = target.info(own)
    if not rec.op_type or (rec.op_type == first.op_type and rec.op == first.op):
        return first
    nodes = covered_nodes(ops, first.tensor, seen)
    if len(nodes) <= 1:  # one model node under another name (Conv run as MNN Convolution): keep the model's words
        return first
    first.fused = FusedOp(op=rec.op, op_type=rec.op_type, target_tensor=rec.target_name,
                          model_nodes=[f"{n.name} ({n.op_type})" for n in nodes])
    first.model_op, first.model_op_type = first.op, first.op_type
    first.op, first.op_type = rec.op, rec.op_type
    return first
