"""Pydantic answer of ``lookup_op_constraints``: what MNN emits, what QNN/HTP accepts, and where each fact comes from."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Fact(BaseModel):
    """One statement about an op, with its kind (constraint, fp16, quant, layout, trap, history, workaround, sdk)."""

    text: str
    kind: str
    source: str


class MnnOpInfo(BaseModel):
    """An MNN OpType and what MNN's QNN backend does with it (None creator = no QNN implementation)."""

    optype: str
    number: int
    creator: str | None = None
    file: str | None = None
    qnn_ops: list[str] = Field(default_factory=list)
    notes: str = ""


class QnnOpInfo(BaseModel):
    name: str
    inputs: list[str] = Field(default_factory=list)
    params: list[str] = Field(default_factory=list)
    source: str = ""
    sdk_sections: dict[str, str] = Field(default_factory=dict, description="doc file -> text of this op's section")
    htp_support: dict[str, str] = Field(default_factory=dict, description="SupportedOps.html row: backend -> cell")


class SdkInfo(BaseModel):
    root: str
    version: str | None = None
    op_def_header: str | None = None
    docs: dict[str, str] = Field(default_factory=dict, description="doc name -> file found")
    notes: list[str] = Field(default_factory=list)


class ProbeRewrite(BaseModel):
    """An equivalent graph tried when the simulator rejects the op itself (e.g. ReduceSumSquare)."""

    description: str
    nodes: list[str]
    accepted: bool
    stage: str
    message: str
    source: str


class ProbeResult(BaseModel):
    """Outcome of a one-op ONNX graph on the HTP simulator (QNN EP, CPU fallback forbidden)."""

    onnx_op: str
    accepted: bool
    stage: str = Field(description="'create' (QNN refused the graph) or 'run' (created and executed)")
    message: str
    qnn_messages: list[str] = Field(default_factory=list)
    inputs: list[str] = Field(default_factory=list)
    attributes: dict[str, str] = Field(default_factory=dict)
    soc_model: int
    seconds: float
    rewrite: ProbeRewrite | None = Field(default=None, description="equivalent rewrite tried after a rejection")


class OpConstraints(BaseModel):
    query: str
    kinds: list[str] = Field(description="namespaces the name matched: mnn, onnx, qnn")
    mnn: list[MnnOpInfo] = Field(default_factory=list)
    onnx_ops: list[str] = Field(default_factory=list)
    qnn: list[QnnOpInfo] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    sdk: SdkInfo | None = None
    probe: ProbeResult | None = None
    sources: list[str] = Field(default_factory=list)
