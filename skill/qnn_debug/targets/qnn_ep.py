"""Sessions on Qualcomm's HTP simulator (onnxruntime-qnn's x86_64 ``libQnnHtp.so``) that never fall back.

Measured facts this module encodes (see the HTP-simulator reference):
- ``InferenceSession.run`` silently retries on CPU after an EP failure and returns CPU numbers that
  match fp32 exactly; so every session sets ``session.disable_cpu_ep_fallback=1`` *and* calls
  ``disable_fallback()``;
- sessions in one process share the QNN backend (a later session inherits the earlier numerics), so
  call this once per process per provider configuration (targets do it in a worker process);
- unknown provider options are silently accepted and most bad values only log a warning, so options
  are validated here;
- ``soc_model`` decides the numerics: absent/0/30 → fp32-accurate, >= 36 → fp16.

Import this module only inside a worker process or a test: it loads onnxruntime and the QNN EP.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadInputError, TargetError, UnsupportedOnTargetError, flatten_message
from ..mnn.soc import ARCHS, FP32_SOCS, SOC_IDS, arch_for, known_soc_hint

_registered = False
_log_lock = threading.Lock()
_log_lines: list[str] = []


@dataclass
class QnnSessionInfo:
    """A session plus what we learned creating it: node assignment and the QNN/ORT log."""

    session: Any
    options: dict[str, str]
    assignment: list[dict[str, Any]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    @property
    def qnn_node_count(self) -> int:
        return sum(len(a["nodes"]) for a in self.assignment if a["provider"] == "QNNExecutionProvider")


def provider_options(soc_model: int, htp_arch: int | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Validated HTP provider options; raises BadInputError for values the EP would silently ignore."""
    if soc_model not in SOC_IDS and soc_model != 0:
        raise BadInputError(f"unknown soc_model {soc_model}", hint=known_soc_hint())
    arch = htp_arch if htp_arch is not None else (arch_for(soc_model) if soc_model else None)
    if arch is not None and arch not in ARCHS:
        raise BadInputError(f"unknown htp_arch {arch}", hint=f"use one of {sorted(ARCHS)}, without the 'v'")
    opts = {"backend_type": "htp"}
    if soc_model:
        opts["soc_model"] = str(soc_model)
    if arch is not None:
        opts["htp_arch"] = str(arch)
    if soc_model not in FP32_SOCS:
        opts["enable_htp_fp16_precision"] = "1"
    opts.update(extra or {})
    return opts


def _register() -> None:
    global _registered
    if _registered:
        return
    import onnxruntime as ort
    import onnxruntime_qnn as oq

    try:
        ort.register_execution_provider_library(oq.get_ep_name(), oq.get_library_path())
    except Exception as e:  # already registered in this process is fine
        if "already" not in str(e).lower():
            raise TargetError(f"could not load the QNN execution provider: {e}", hint="reinstall onnxruntime-qnn") from None

    def _log_cb(severity: int, category: str, logid: str, code_location: str, message: str) -> None:
        with _log_lock:
            _log_lines.append(f"[{severity}] {message}")

    ort.set_default_logger_callback(_log_cb)
    _registered = True


def take_log() -> list[str]:
    with _log_lock:
        lines = list(_log_lines)
        _log_lines.clear()
    return lines


def create_session(model: bytes | str, options: dict[str, str], *, disabled_optimizers: list[str] | None = None,
                   verbose: bool = True, external_data_dir: str | None = None) -> QnnSessionInfo:
    """Create an HTP session that refuses CPU fallback, recording assignment and the QNN log.

    Raises :class:`UnsupportedOnTargetError` listing the nodes QNN rejected (with QNN's reasons when
    the log has them) instead of ever running anything on the CPU EP.
    """
    import onnxruntime as ort
    import onnxruntime_qnn as oq

    _register()
    take_log()
    devices = [d for d in ort.get_ep_devices() if d.ep_name == oq.get_ep_name()]  # HTP shows as device type CPU
    if not devices:
        raise TargetError("the QNN execution provider exposes no device", hint="reinstall onnxruntime-qnn")
    so = ort.SessionOptions()
    so.log_severity_level = 0 if verbose else 2
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if external_data_dir:  # a model given as bytes whose initializers point into files in this folder
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_dir)
    so.add_provider_for_devices(devices, options)
    try:
        kwargs: dict[str, Any] = {"sess_options": so}
        if disabled_optimizers:
            kwargs["disabled_optimizers"] = disabled_optimizers
        session = ort.InferenceSession(model, **kwargs)
    except Exception as e:
        log = take_log()
        raise _creation_error(str(e), log, model) from None
    session.disable_fallback()
    assignment = []
    for sg in session.get_provider_graph_assignment_info():
        assignment.append({"provider": sg.ep_name, "nodes": [{"name": n.name, "op_type": n.op_type} for n in sg.get_nodes()]})
    log = take_log()
    cpu_nodes = [n for a in assignment if a["provider"] != "QNNExecutionProvider" for n in a["nodes"]]
    if cpu_nodes:
        hint, fed = _refusal_hint(model, [n["name"] for n in cpu_nodes],
                                  f"replace or decompose these ops; see {_op_step(cpu_nodes[0]['op_type'])}")
        raise UnsupportedOnTargetError(
            f"{len(cpu_nodes)} node(s) would run on CPU, not QNN: "
            + ", ".join(f"{n['name']} ({n['op_type']})" for n in cpu_nodes[:20]),
            hint=hint, details={"nodes": cpu_nodes, "reasons": _reasons(log), "runtime_fed_inputs": fed},
        )
    return QnnSessionInfo(session=session, options=options, assignment=assignment, log=log)


def _refusal_hint(model: bytes | str | None, names: list[str], op_hint: str) -> tuple[str, list[dict[str, Any]]]:
    """The hint for refused nodes and the inputs behind it: when an input QNN needs constant is fed at run time
    (:mod:`.runtime_fed`), how to narrow without that part; otherwise ``op_hint`` (the op's constraints)."""
    from .runtime_fed import narrowing_hint, runtime_fed_inputs

    fed = runtime_fed_inputs(model, names) if model is not None and names else []
    if model is None or not fed:
        return op_hint, []
    return narrowing_hint(fed, names, model), [f.model_dump() for f in fed]


def _op_step(op_type: str | None) -> str:
    """The op-lookup command, runnable as printed: the concrete op when known, else a quoted variable."""
    import shlex

    if op_type:
        return f"`qnn-debug op {shlex.quote(op_type)}`"
    return '`qnn-debug op "$OP_TYPE"` (set OP_TYPE to the op type named in details.nodes)'


def _reasons(log: list[str]) -> list[str]:
    keys = ("Validation FAILED", "not supported by QNN", "Unsupported nodes", "REASON", "only support")
    return list(dict.fromkeys(line for line in log if any(k in line for k in keys)))[:50]


_UNSUPPORTED_NODE = re.compile(r"\{ name: ([^,]+), type: ([^ }]+) \}")
_FAILED_NODE = re.compile(r"Operator type: (\S+) Node name: (\S+)")
_REASON = re.compile(r"REASON : (.+?)(?:\n|$)")


def _creation_error(message: str, log: list[str], model: bytes | str | None = None) -> TargetError:
    reasons = _reasons(log)
    if "assigned to the default CPU EP" in message or reasons:
        text = "\n".join(reasons)
        nodes = list(dict.fromkeys([*_UNSUPPORTED_NODE.findall(text), *((n, t) for t, n in _FAILED_NODE.findall(text))]))
        why = list(dict.fromkeys(r.strip() for r in _REASON.findall(text)))
        summary = (f"{len(nodes)} node(s): " + ", ".join(f"{n} ({t})" for n, t in nodes[:10])) if nodes else message.splitlines()[-1]
        if why:
            summary += " — " + "; ".join(why[:3])
        hint, fed = _refusal_hint(model, [n for n, _ in nodes],
                                  f"see details.reasons for QNN's own words; {_op_step(nodes[0][1] if nodes else None)} "
                                  "lists the op's constraints")
        return UnsupportedOnTargetError(
            "QNN cannot run every node of this model and CPU fallback is forbidden: " + flatten_message(summary),
            hint=hint,
            details={"nodes": [{"name": n, "op_type": t} for n, t in nodes], "reasons": reasons,
                     "ort_error": message[-2000:], "runtime_fed_inputs": fed},
        )
    return TargetError(
        f"QNN session creation failed: {flatten_message(message.splitlines()[-1]) if message else 'unknown error'}",
        hint="see details.log for the QNN backend messages",
        details={"log": [line for line in log if line.startswith(("[3]", "[4]"))][-30:], "ort_error": message[-2000:]},
    )
