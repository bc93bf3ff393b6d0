"""The registry of public operations: which request and result model each one has, and its code.

Importing this module imports the request and result models only (pydantic, no numpy/onnx/MNN);
each operation's code is named as ``"module:function"`` and imported when the operation runs.
"""

from __future__ import annotations

from ..ops.models import OpConstraints
from ..triage.models import TriageResult
from . import Operation, register
from .requests import OpLookupRequest, TriageRequest

register(Operation("triage", TriageRequest, TriageResult, "qnn_debug.api.runners:triage",
                   summary="classify a failing run's log and say what to run next"))
register(Operation("op_lookup", OpLookupRequest, OpConstraints, "qnn_debug.api.runners:op_lookup",
                   summary="QNN/HTP constraints of an op, optionally probed on the simulator"))
