"""``lookup_op_constraints``: one answer about an op, merged from three sources, each fact with its origin.

(a) the user's QNN SDK (``--sdk`` or ``$QNN_SDK_ROOT``): QnnOpDef.h names and the HTML op documents;
(b) the curated knowledge file ``data/qnn_op_knowledge.json`` plus MNN's OpType → QNN mapping;
(c) optionally, an empirical probe on the HTP simulator (worker process).
The name may be an MNN OpType (name or number), an ONNX op or a QNN op; all matching views are merged.
"""

from __future__ import annotations

import difflib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import BadInputError
from ..mnn import optypes
from ..mnn.soc import DEFAULT_SOC
from ..progress import NULL_PROGRESS, Progress
from .models import Fact, MnnOpInfo, OpConstraints, QnnOpInfo
from .probe import InputSpec, parse_attr, parse_input_spec, probe_op
from .sdk import SdkIndex, doc_section, load_sdk, resolve_sdk_root, supported_ops_row

KNOWLEDGE_FILE = Path(__file__).resolve().parent.parent / "data" / "qnn_op_knowledge.json"


@cache
def knowledge() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(KNOWLEDGE_FILE.read_text(encoding="utf-8"))
    return data


def lookup_op_constraints(
    op: str | int,
    *,
    sdk: str | os.PathLike[str] | None = None,
    probe: bool = False,
    shapes: list[str] | None = None,
    attrs: list[str] | dict[str, Any] | None = None,
    soc_model: int = DEFAULT_SOC,
    opset: int = 20,
    timeout: float = 180.0,
    progress: Progress = NULL_PROGRESS,
) -> OpConstraints:
    """Everything we know about ``op`` for MNN's QNN backend on HTP; raises BadInputError for unknown names."""
    query = str(op).strip()
    if not query:
        raise BadInputError("no op given", hint="e.g. `qnn-debug op Convolution`, `qnn-debug op 17`, `qnn-debug op Conv2d`")
    if len(query) > 100:
        raise BadInputError("op name is too long", hint="give one MNN OpType, ONNX op or QNN op name")
    root = resolve_sdk_root(sdk)
    index = load_sdk(root) if root is not None else None
    result = _resolve(query, index)
    _add_knowledge(result)
    if index is not None:
        _add_sdk(result, index)
    if probe or shapes or attrs:
        result.probe = _run_probe(result, shapes or [], attrs or [], soc_model, opset, timeout, progress)
    result.sources = sorted({f.source for f in result.facts} | {m.file or "" for m in result.mnn} - {""})
    return result


def _resolve(query: str, index: SdkIndex | None) -> OpConstraints:
    result = OpConstraints(query=query, kinds=[])
    kb = knowledge()
    mnn_names: list[str] = []
    try:
        mnn_names.append(optypes.canonical_optype(query))
        result.kinds.append("mnn")
    except BadInputError:
        pass
    onnx_map: dict[str, list[str]] = kb["onnx_to_mnn"]
    onnx_key = next((k for k in onnx_map if k.lower() == query.lower()), None)
    if onnx_key:
        result.kinds.append("onnx")
        result.onnx_ops.append(onnx_key)
        mnn_names += [n for n in onnx_map[onnx_key] if n not in mnn_names]
    qnn_names = _qnn_names(index)
    qnn_key = next((n for n in qnn_names if n.lower() == query.lower()), None)
    if qnn_key:
        result.kinds.append("qnn")
        mnn_names += [m.optype for m in optypes.optypes_emitting(qnn_key) if m.optype not in mnn_names]
    if not result.kinds:
        candidates = list(dict.fromkeys([*optypes.all_optypes(), *onnx_map, *sorted(qnn_names)]))
        close = difflib.get_close_matches(query, candidates, n=5, cutoff=0.6)
        raise BadInputError(f"unknown op {query!r}: not an MNN OpType, an ONNX op we map, or a QNN op",
                            hint=("did you mean " + ", ".join(close) + "?") if close else "see schema/default/MNN.fbs, the ONNX spec or QnnOpDef.h",
                            details={"suggestions": close})
    for name in mnn_names:
        mapping = optypes.qnn_mapping(name)
        number = optypes.optype_number(name)
        if mapping is None:
            result.mnn.append(MnnOpInfo(optype=name, number=number,
                                        notes="MNN's QNN backend registers no creator for this OpType: it does not run on the NPU"))
        else:
            result.mnn.append(MnnOpInfo(optype=name, number=number, creator=mapping.creator, file=mapping.file,
                                        qnn_ops=mapping.qnn_ops, notes=mapping.notes))
    # creators like UnaryOp/BinaryOp emit a different QNN op per subtype: name none of them as "the" QNN op
    wanted_qnn = ([qnn_key] if qnn_key else []) + [q for m in result.mnn if len(m.qnn_ops) <= 8 for q in m.qnn_ops[:1]]
    for name in dict.fromkeys(wanted_qnn):
        spec = kb["qnn_ops"].get(name, {})
        result.qnn.append(QnnOpInfo(name=name, inputs=spec.get("inputs", []), params=spec.get("params", []),
                                    source=kb["qnn_ops_source"] if spec else ""))
    if not result.onnx_ops:
        result.onnx_ops = [k for k, v in onnx_map.items() if set(v) & {m.optype for m in result.mnn}][:8]
    return result


@cache
def _known_qnn_ops() -> frozenset[str]:
    names = set(knowledge()["qnn_ops"])
    for m in optypes.qnn_mappings():
        names.update(m.qnn_ops)
    return frozenset(names)


def _qnn_names(index: SdkIndex | None) -> set[str]:
    names = set(_known_qnn_ops())
    if index is not None:
        names.update(index.ops)
    return names


def _add_knowledge(result: OpConstraints) -> None:
    keys = {result.query.lower(), *(m.optype.lower() for m in result.mnn), *(o.lower() for o in result.onnx_ops),
            *(q.name.lower() for q in result.qnn)}
    for item in knowledge()["facts"]:
        applies = {a.lower() for a in item["applies_to"]}
        if "*" in applies or applies & keys:
            result.facts.append(Fact(text=item["text"], kind=item["kind"], source=item["source"]))
    for m in result.mnn:
        if m.creator:
            result.facts.append(Fact(text=f"MNN {m.optype} ({m.number}) → QNN {', '.join(m.qnn_ops)}. {m.notes}".strip(),
                                     kind="mnn", source=f"{optypes.qnn_backend_source()['repo']} {m.file}"))


def _add_sdk(result: OpConstraints, index: SdkIndex) -> None:
    result.sdk = index.info
    for q in result.qnn:
        sdk_name = index.op_name(q.name)
        if sdk_name is not None:
            q.params = index.ops[sdk_name]
            q.source = f"SDK {index.info.op_def_header}"
            result.facts.append(Fact(text=f"QnnOpDef.h defines {sdk_name} with params: {', '.join(q.params) or '(none)'}",
                                     kind="sdk", source=str(index.info.op_def_header)))
        elif index.ops:
            result.facts.append(Fact(text=f"{q.name} is not defined in this SDK's QnnOpDef.h (older SDK?)", kind="sdk",
                                     source=str(index.info.op_def_header)))
        for doc in ("MasterOpDef.html", "HtpOpDefSupplement.html"):
            path = index.info.docs.get(doc)
            text = doc_section(path, q.name) if path else None
            if text:
                q.sdk_sections[doc] = text
                result.facts.append(Fact(text=f"{doc} §{q.name}: {text[:600]}", kind="sdk", source=path or doc))
        path = index.info.docs.get("SupportedOps.html")
        row = supported_ops_row(path, q.name) if path else {}
        if row:
            q.htp_support = row
            result.facts.append(Fact(text=f"SupportedOps.html: {q.name}: " + "; ".join(f"{k}: {v}" for k, v in row.items()),
                                     kind="sdk", source=path or "SupportedOps.html"))


def _run_probe(result: OpConstraints, shapes: list[str], attrs: list[str] | dict[str, Any], soc_model: int,
               opset: int, timeout: float, progress: Progress) -> Any:
    onnx_op = probe_target(result)
    if onnx_op is None:
        near = ", ".join(result.onnx_ops[:4])
        raise BadInputError(f"no ONNX op builds {result.query!r} on its own, so there is nothing to probe for it",
                            hint=(f"probe the ONNX op of your model that emits it (one of: {near}), e.g. "
                                  f"`qnn-debug op {result.onnx_ops[0]} --probe`") if near else
                                 "probe with an ONNX op name instead, e.g. `qnn-debug op Conv --probe`")
    defaults = knowledge()["probe_defaults"].get(onnx_op, {})
    specs: list[InputSpec] = [parse_input_spec(s) for s in (shapes or defaults.get("inputs") or ["1x8x16x16"])]
    parsed: dict[str, Any] = dict(attrs) if isinstance(attrs, dict) else dict(parse_attr(a) for a in attrs)
    if not attrs:
        parsed = {k: v for k, v in (parse_attr(f"{k}={v}") for k, v in defaults.get("attrs", {}).items())}
    return probe_op(onnx_op, specs, parsed, soc_model=soc_model, opset=opset, timeout=timeout, progress=progress)


def probe_target(result: OpConstraints) -> str | None:
    """The ONNX op whose one-node graph exercises ``result.query`` on the simulator, or None.

    An ONNX or MNN name probes its own (first) ONNX op. A QNN op name probes only an ONNX op whose MNN op emits
    that QNN op FIRST: QNN ``Dequantize`` is also emitted by the quantized path of Convolution, and probing a Conv
    for it would answer a question nobody asked."""
    onnx_map: dict[str, list[str]] = knowledge()["onnx_to_mnn"]
    by_name = next((o for o in result.onnx_ops if o.lower() == result.query.lower()), None)
    if by_name:
        return by_name
    if "mnn" in result.kinds and result.mnn:  # the query's own OpType comes first in result.mnn
        own = result.mnn[0].optype
        found = next((o for o, mnn in onnx_map.items() if own in mnn), None)
        if found or "qnn" not in result.kinds:
            return found
    primary = {m.optype for m in result.mnn if m.qnn_ops[:1] and m.qnn_ops[0].lower() == result.query.lower()}
    return next((o for o, mnn in onnx_map.items() if primary & set(mnn)), None)


def op_next_step(op: str) -> tuple[str, str] | None:
    """The `qnn-debug op` command to suggest for an op named in a log, so that it runs as printed.

    ``None`` when the name is not an op we know (the command would be refused); ``--probe`` only when the op
    maps to an ONNX op the simulator probe can build.
    """
    if not op or len(op) > 100 or not all(ch.isalnum() or ch in "_.:+-" for ch in op):
        return None
    try:
        result = _resolve(op, None)
    except BadInputError:
        return None
    if probe_target(result) is not None:
        return (f"qnn-debug op {op} --probe",
                "look up its QNN/HTP constraints and probe it alone on the HTP simulator")
    return (f"qnn-debug op {op}", "look up its QNN/HTP constraints and MNN's mapping (no ONNX op to probe)")
