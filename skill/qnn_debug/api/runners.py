"""The code behind each operation: request model in, result model out, engine calls in between.

Kept thin: each runner only translates its request into the engine function's arguments.
"""

from __future__ import annotations

from ..ops.models import OpConstraints
from ..progress import Progress
from ..triage.models import TriageResult
from .requests import OpLookupRequest, TriageRequest


def triage(request: TriageRequest, progress: Progress) -> TriageResult:
    from ..errors import BadInputError
    from ..triage import triage_log

    if (request.log_text is None) == (request.log_path is None):
        raise BadInputError("pass exactly one of log_text or log_path", hint="paste the log as log_text, or give log_path")
    if request.log_path is not None:
        return triage_log(request.log_path, cases=request.cases_path)
    return triage_log(text=request.log_text, cases=request.cases_path)


def op_lookup(request: OpLookupRequest, progress: Progress) -> OpConstraints:
    from ..ops import lookup_op_constraints

    return lookup_op_constraints(request.op, sdk=request.sdk, probe=request.probe or bool(request.shapes or request.attrs),
                                 shapes=request.shapes, attrs=request.attrs, soc_model=request.soc, progress=progress)
