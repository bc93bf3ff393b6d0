"""Did the target run the reference's model? Node by node, where the two ONNX graphs differ.

Diagnosing an edited model against the original (``diagnose EDITED --reference-model ORIGINAL``), or a dump of
another export, pairs tensors by name; the first failing tensor is then named after the *reference's* node,
while the model that ran may compute it with another op (a Sub where the reference has an Add). An engineer
checks that first: a difference that is the edit itself is not QNN's. This says which nodes differ and how.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    import onnx

    from ..runstore import Run

MAX_LISTED = 20


class NodeDifference(BaseModel):
    """One reference node whose output the target's model computes otherwise (or not at all)."""

    tensor: str  # the output both graphs name
    node: str  # the reference's node
    reference_op_type: str
    target_op_type: str | None  # None: no node of the target's model writes ``tensor``
    target_node: str | None = None
    what: str  # "op type", "inputs", "attributes" or "missing"


class ModelDifference(BaseModel):
    """The target's model is another file than the reference's, and these nodes differ."""

    target_model: str
    reference_model: str
    differing_nodes: int
    first: list[NodeDifference]  # in reference order, at most MAX_LISTED

    def at(self, tensor: str) -> NodeDifference | None:
        return next((d for d in self.first if d.tensor == tensor), None)

    def sentence(self) -> str:
        head = self.first[0] if self.first else None
        where = f"; first: {describe(head)}" if head is not None else ""
        return (f"the target ran {Path(self.target_model).name}, not the reference's {Path(self.reference_model).name}: "
                f"{self.differing_nodes} node(s) differ{where}")


def describe(d: NodeDifference) -> str:
    if d.target_op_type is None:
        return f"no node of the target's model writes `{d.tensor}` ({d.node}, {d.reference_op_type}, in the reference)"
    if d.what == "op type":
        return f"`{d.tensor}` is computed by {d.target_op_type} there and by {d.reference_op_type} in the reference"
    return f"{d.node} ({d.reference_op_type}) has other {d.what} there"


def model_difference(reference_model: onnx.ModelProto | None, reference_path: str | None,
                     target: Run) -> ModelDifference | None:
    """The differences when the target's run recorded an ONNX model other than the reference's; None if the
    same file (by hash), not ONNX (an .mnn is another format by design) or not readable any more."""
    from .. import fs
    from ..errors import BadInputError
    from ..onnx_graph import load_onnx
    from ..runstore import sha256_file

    info = target.record.model
    if reference_model is None or reference_path is None or info is None or info.format != "onnx":
        return None
    path = Path(info.path)
    try:
        fs.check(path, what="the target's model", kind="file")
        if info.sha256 and sha256_file(path) != info.sha256:
            return None  # changed since the run: nothing reliable to say
        if sha256_file(Path(reference_path)) == sha256_file(path):
            return None
        other = load_onnx(path, load_external_data=False)
    except (BadInputError, OSError):
        return None
    differences = _differences(reference_model, other)
    if not differences:
        return None
    return ModelDifference(target_model=str(path), reference_model=reference_path,
                           differing_nodes=len(differences), first=differences[:MAX_LISTED])


def _differences(reference: onnx.ModelProto, other: onnx.ModelProto) -> list[NodeDifference]:
    writer = {out: node for node in other.graph.node for out in node.output if out}
    found: list[NodeDifference] = []
    for node in reference.graph.node:
        outputs = [o for o in node.output if o]
        if not outputs:
            continue
        theirs = writer.get(outputs[0])
        what = None
        if theirs is None:
            what = "missing"
        elif theirs.op_type != node.op_type or theirs.domain != node.domain:
            what = "op type"
        elif list(theirs.input) != list(node.input):
            what = "inputs"
        elif _attrs(theirs) != _attrs(node):
            what = "attributes"
        if what is not None:
            found.append(NodeDifference(tensor=outputs[0], node=node.name or node.op_type, reference_op_type=node.op_type,
                                        target_op_type=theirs.op_type if theirs is not None else None,
                                        target_node=(theirs.name or theirs.op_type) if theirs is not None else None,
                                        what=what))
    return found


def _attrs(node: onnx.NodeProto) -> dict[str, bytes]:
    return {a.name: a.SerializeToString() for a in node.attribute}
