"""The whole graph as a chain of segments: the layer blocks and the ops outside the layers between them.

Why the ops outside the layers are segments of their own: in a vision-language export much of what goes wrong
lives there — the rotary tables built once from ``position_ids`` before the first layer (2-D rows in the vision
encoder, M-RoPE sections in the decoder), the deepstack features added to the hidden state between the first
decoder layers, the patch and deepstack mergers after the vision blocks. Judged like a block (fed the reference
values of what it reads), each is checked on its own, and a block is fed the reference values such a segment
made, so neither hides the other.

Where an op outside the layers goes: after the last block any of its inputs comes from (through other outside ops),
or before the first block when none does. A block that reads an outside value made after a later block is not a
chain; that model is refused.
"""

from __future__ import annotations

import onnx

from ..errors import BadInputError
from ..onnx_graph import nodes_in_order
from .cut import Block, positions_block


def slot_label(blocks: list[Block], slot: int) -> str:
    """Where the outside segment of even ``slot`` sits: slot 0 before the first block, 2k+2 after block k."""
    k = slot // 2 - 1
    if k < 0:
        return f"outside the layers, before {blocks[0].name}"
    if k + 1 < len(blocks):
        return f"outside the layers, between {blocks[k].name} and {blocks[k + 1].name}"
    return f"outside the layers, after {blocks[k].name}"


def chain(model: onnx.ModelProto, blocks: list[Block]) -> list[Block]:
    """Segments in order, one per slot (``2k+1`` = block k, even slots the outside ops around it; empty ones too)."""
    nodes = nodes_in_order(model)
    slot_of_pos: dict[int, int] = {}
    for k, b in enumerate(blocks):
        for p in b.positions:
            slot_of_pos[p] = 2 * k + 1
    made_in: dict[str, int] = {}  # tensor -> the slot after which it exists (block k's outputs: 2k+2)
    outside: dict[int, list[int]] = {}
    for n in nodes:
        if n.position in slot_of_pos:
            s = slot_of_pos[n.position]
            for o in n.outputs:
                made_in[o] = s + 1
            continue
        if n.op_type == "Constant":
            continue
        s = max((made_in.get(i, 0) for i in n.inputs if i), default=0)
        outside.setdefault(s, []).append(n.position)
        for o in n.outputs:
            made_in[o] = s
    for k, b in enumerate(blocks):
        late = [i for i in b.inputs if made_in.get(i, 0) > 2 * k]
        if late:
            raise BadInputError(f"{b.name} reads {late[0]!r}, made outside the layers after a later layer",
                                hint="the layers are not a chain of blocks; use `qnn-debug bisect` on this model")
    out: list[Block] = []
    for slot in range(2 * len(blocks) + 1):
        if slot % 2:
            out.append(blocks[slot // 2])
            continue
        k = slot // 2 - 1
        edge = blocks[max(k, 0)]
        first = edge.last if k >= 0 else edge.first
        out.append(positions_block(model, outside.get(slot, []), first, first, slot_label(blocks, slot)))
    return out
