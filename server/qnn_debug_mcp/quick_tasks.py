"""The work of the quick tools, as module-level functions a child process can import cheaply.

Kept free of MCP imports: :mod:`.child_call` starts a fresh interpreter per call, which imports only
this module and the engine part it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # each task imports only what it uses: a child pays for one engine part
    from qnn_debug.device.probe import ProbeResult
    from qnn_debug.llm.check_models import LlmCheckRequest, LlmCheckResult
    from qnn_debug.ops.models import OpConstraints
    from qnn_debug.triage.models import TriageResult


def lookup(op: str) -> OpConstraints:
    from qnn_debug.ops import lookup_op_constraints

    return lookup_op_constraints(op)


def toggle(folder: str, value: bool) -> dict[str, object]:
    from qnn_debug.mnn.testdir import toggle_shape_mutable

    return toggle_shape_mutable(folder, value).model_dump()


def triage(path: str | None, text: str | None, cases: str | None = None) -> TriageResult:
    from qnn_debug.triage import triage_log

    return triage_log(path, cases=cases) if path is not None else triage_log(text=text, cases=cases)


def devices(adb: str, timeout: float) -> dict[str, Any]:
    from qnn_debug.device_ops import list_devices

    return list_devices(adb=adb, timeout=timeout).model_dump(mode="json")


def probe(**kwargs: Any) -> ProbeResult:
    from qnn_debug.device_ops import probe

    result: ProbeResult = probe(**kwargs)
    return result


def check_llm(request: LlmCheckRequest) -> LlmCheckResult:
    from qnn_debug.llm.check import check_llm_export

    return check_llm_export(request)
