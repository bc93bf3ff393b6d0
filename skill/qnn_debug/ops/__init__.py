"""QNN op constraints for MNN's QNN backend: SDK docs, curated knowledge and an HTP-simulator probe."""

from __future__ import annotations

from .lookup import lookup_op_constraints
from .models import Fact, OpConstraints, ProbeResult

__all__ = ["Fact", "OpConstraints", "ProbeResult", "lookup_op_constraints"]
