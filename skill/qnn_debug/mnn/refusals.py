"""What MNN's own tools print when its QNN backend refuses a model, read into facts a user can act on.

MNN's QNN backend asks each op's creator for an execution; a creator that declines returns nothing and the
backend prints ``MNN_QNN: Don't support type <OpType number>, <op name>.`` (QNNBackend.cpp:1632-1637 at MNN
4d40bdb). The op name is the name of the op's first output tensor in an ONNX-converted model. What follows
depends on the tool: ``compilefornpu`` prints ``StaticModule resize failed`` and still exits 0 with an empty
``qnn/llm.mnn``; ``MNN2QNNModel`` goes on to the SDK's model-lib generator, which fails with an SDK-looking
message; ``ModuleBasic`` runs the op elsewhere or not at all. Two other lines are worth saying plainly:
``Failed to validate binary: <code>`` (the QNN backend refused a context binary, and MNN goes on) and
MNN's "recompile with `MNN_WITH_PLUGIN`" (an offline model run on a build without plugin support).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from .optypes import optype_name

_REFUSED = re.compile(r"MNN_QNN: Don't support type (\d+)(?:, (.*?))?\.?\s*$")
_VALIDATE = re.compile(r"Failed to validate binary: (-?\d+)")
_PLUGIN = "recompile with `MNN_WITH_PLUGIN`"
_RESIZE = re.compile(r"StaticModule resize failed[^\n]*")

# The creator conditions MNN's QNN backend declines on, by OpType number (read from the creators at 4d40bdb).
CONDITIONS: dict[int, str] = {
    91: ("MNN's QNN StridedSlice takes an ONNX/Torch slice (fromType 1) only with 5 inputs — data, starts, ends, "
         "axes and steps — and a TF one (fromType 0) only with 4 inputs and no new-axis or ellipsis mask "
         "(QNNStridedSlice.cpp:219-234); an ONNX Slice written without `steps` has 4 inputs and is refused"),
}
REMEDIES: dict[int, str] = {
    91: ("export the ONNX Slices with an explicit `steps` input (torch.onnx writes data, starts, ends, axes, steps), "
         "or add a constant steps input of ones to each 4-input Slice before converting to MNN"),
}


class QnnRefusal(BaseModel):
    """One op MNN's QNN backend would not create."""

    type_id: int
    type_name: str | None = None
    op: str | None = Field(default=None, description="the op's name as MNN printed it (its first output tensor)")
    condition: str | None = Field(default=None, description="the creator condition that refused it, when known")
    remedy: str | None = None

    def describe(self) -> str:
        what = f"{self.type_name or 'OpType'} (MNN OpType {self.type_id})"
        where = f" at {self.op!r}" if self.op else ""
        return f"{what}{where}" + (f": {self.condition}" if self.condition else "")


class ToolFacts(BaseModel):
    """The lines of an MNN tool's output that decide what went wrong."""

    refusals: list[QnnRefusal] = Field(default_factory=list)
    validate_binary_codes: list[int] = Field(default_factory=list)
    plugin_missing: bool = False
    resize_failed: str | None = None


def _name(type_id: int) -> str | None:
    from ..errors import BadInputError

    try:
        return optype_name(type_id)
    except BadInputError:
        return None


def read_tool_output(text: str) -> ToolFacts:
    """The refusals (each op once), failed validations, a missing plugin build and a failed resize in ``text``."""
    facts = ToolFacts()
    seen: set[tuple[int, str | None]] = set()
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if m := _REFUSED.search(line):
            key = (int(m.group(1)), m.group(2) or None)
            if key not in seen:
                seen.add(key)
                facts.refusals.append(QnnRefusal(type_id=key[0], type_name=_name(key[0]), op=key[1],
                                                 condition=CONDITIONS.get(key[0]), remedy=REMEDIES.get(key[0])))
        elif m := _VALIDATE.search(line):
            facts.validate_binary_codes.append(int(m.group(1)))
        elif _PLUGIN in line:
            facts.plugin_missing = True
        elif (m := _RESIZE.search(line)) and facts.resize_failed is None:
            facts.resize_failed = m.group(0).strip()
    return facts


def refusal_message(facts: ToolFacts, tool: str) -> str | None:
    """``MNN's QNN backend refused …`` naming every refused op, or None when nothing was refused."""
    if not facts.refusals:
        return None
    ops = "; ".join(r.describe() for r in facts.refusals[:5])
    more = f" (and {len(facts.refusals) - 5} more)" if len(facts.refusals) > 5 else ""
    return f"{tool}: MNN's QNN backend refused {len(facts.refusals)} op(s) ('Don't support type'): {ops}{more}"


def refusal_hint(facts: ToolFacts) -> str:
    remedies = [r.remedy for r in facts.refusals if r.remedy]
    return (remedies[0] if remedies else "keep the refused op off QNN (change the export so it takes a form MNN's QNN "
            "backend creates) and convert again; `qnn-debug op <OpType>` shows what MNN's QNN backend accepts")
