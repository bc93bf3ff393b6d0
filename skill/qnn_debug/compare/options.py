"""How a comparison runs: thresholds, streaming chunk, threads, and which optional stages run."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from .align import DEFAULT_CHUNK
from .thresholds import Thresholds


class CompareOptions(BaseModel):
    thresholds: Thresholds = Field(default_factory=Thresholds)
    chunk: int = DEFAULT_CHUNK  # elements per streamed chunk
    threads: int = Field(default_factory=lambda: min(2, os.cpu_count() or 1))  # tensors compared at once
    local_checks: bool = True  # re-run suspects on CPU (needs the ONNX model)
    patterns: bool = True  # test alternative semantics on a confirmed bug
