"""What ``dump`` returns (pydantic only; :mod:`qnn_debug.dump` re-exports it)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DumpResult(BaseModel):
    """What a dump captured, in a form small enough for a JSON answer."""

    out: str
    target: str
    precision: str
    soc_model: int | None = None
    htp_arch: int | None = None
    tensors: int
    quantized_tensors: int = 0
    qnn_nodes: int | None = None  # nodes of the model's own (unmarked) graph placed on QNN
    outputs: list[str] = Field(default_factory=list)
    observer_effect_db: dict[str, float] | None = None
    warnings: list[str] = Field(default_factory=list)
    inputs_sha256: str | None = None
