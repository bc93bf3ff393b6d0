"""Worker side of the op probe: build a one-op ONNX model and try it on the HTP simulator.

Runs only inside ``qnn_debug.workers`` (it imports onnx, numpy and the QNN EP). "QNN refused the op" is a
valid answer here, returned as data; only a malformed request raises.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import BadInputError, QnnDebugError
from ..progress import Progress

_NP = {"float32": "float32", "float16": "float16", "int64": "int64", "int32": "int32", "int8": "int8", "uint8": "uint8", "bool": "bool"}


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from ..mnn.soc import DEFAULT_SOC
    from ..targets.qnn_ep import create_session, provider_options

    op = str(request["op"])
    opset = int(request.get("opset", 20))
    soc = int(request.get("soc_model", DEFAULT_SOC))
    try:
        schema = onnx.defs.get_schema(op, opset)
    except Exception:
        raise BadInputError(f"{op!r} is not an ONNX operator at opset {opset}", hint="use the ONNX op name, e.g. Conv, Softmax, Erf") from None
    given = len(request["inputs"])
    if given < schema.min_input:
        formal = ", ".join(f.name for f in list(schema.inputs)[: schema.min_input])
        raise BadInputError(
            f"{op} takes at least {schema.min_input} input(s) ({formal}); the probe got {given} input shape(s)",
            hint="give one shape (--shape) per input, in order (the first is fed at run time, later ones become "
            "constants), or none at all for a default probe",
        )
    rng = np.random.default_rng(0)
    graph_inputs, initializers, names, feeds = [], [], [], {}
    for i, spec in enumerate(request["inputs"]):
        name = f"in{i}"
        dtype = np.dtype(_NP[spec["dtype"]])
        dims = [int(d) for d in spec["dims"]]
        if spec.get("values") is not None:
            initializers.append(numpy_helper.from_array(np.array(spec["values"], dtype=dtype).reshape(dims), name))
        elif i == 0:
            graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), dims))
            feeds[name] = _random(rng, dtype, dims)
        else:
            initializers.append(numpy_helper.from_array(_random(rng, dtype, dims), name))
        names.append(name if dims != [0] or spec.get("values") is not None else "")
    n_out = max(1, schema.min_output)
    outputs = [f"out{k}" for k in range(n_out)]
    attrs = request.get("attrs", {})
    node = helper.make_node(op, names, outputs, name=f"probe_{op}", **attrs)

    def attempt(nodes: list[Any]) -> tuple[bool, str, str, list[str], float]:
        """(accepted, stage, message, qnn messages, seconds) of one graph on the simulator."""
        graph = helper.make_graph(nodes, "probe", graph_inputs,
                                  [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
                                  initializer=initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = min(model.ir_version, 10)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            onnx.checker.check_model(inferred)
        except Exception as e:
            return False, "build", f"ONNX rejects this node before QNN sees it: {str(e).splitlines()[0][:300]}", [], 0.0
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        start = time.perf_counter()
        try:
            info = create_session(model.SerializeToString(), provider_options(soc, None))
        except QnnDebugError as e:
            msgs = [str(x) for x in (e.details.get("reasons") or e.details.get("log") or [])]
            return False, "create", e.message, msgs, time.perf_counter() - start
        try:
            info.session.run(None, feeds)
        except Exception as e:
            from ..targets.qnn_ep import take_log

            return (False, "run", f"{type(e).__name__}: {str(e).splitlines()[-1][:300]}",
                    [x for x in take_log() if x.startswith(("[3]", "[4]"))][-10:], time.perf_counter() - start)
        ran = ", ".join(f"{n['op_type']}" for a in info.assignment for n in a["nodes"])
        return True, "run", f"QNN accepted and executed the graph on HTP ({ran})", [], time.perf_counter() - start

    accepted, stage, message, msgs, seconds = attempt([node])
    answer = _answer(request, accepted, stage, message, msgs, seconds)
    rewrite = None if accepted or stage == "build" else _rewrite(op, names, outputs, attrs)
    if rewrite is not None:
        nodes, spec = rewrite
        ok, r_stage, r_message, _, _ = attempt(nodes)
        answer["rewrite"] = {"description": spec["description"], "nodes": [n.op_type for n in nodes], "accepted": ok,
                             "stage": r_stage, "message": r_message, "source": spec.get("source", "")}
    return answer


def _rewrite(op: str, names: list[str], outputs: list[str], attrs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]] | None:
    """The equivalent graph of ``data/qnn_op_knowledge.json`` ``equivalent_rewrites`` for ``op``, if any."""
    from onnx import helper

    from .lookup import knowledge

    spec = knowledge().get("equivalent_rewrites", {}).get(op)
    if not spec or not names or len(outputs) != 1:
        return None
    nodes = []
    for i, step in enumerate(spec["nodes"]):
        ins: list[str] = []
        for name in step["inputs"]:
            if name == "$x":
                ins.append(names[0])
            elif name == "$rest":
                ins.extend(names[1:])
            else:
                ins.append(f"rw_{name}")
        outs = [outputs[0] if name == "$y" else f"rw_{name}" for name in step["outputs"]]
        extra = attrs if step.get("attrs") == "same" else {}
        nodes.append(helper.make_node(step["op"], ins, outs, name=f"rewrite_{i}_{step['op']}", **extra))
    return nodes, spec


def _random(rng: Any, dtype: Any, dims: list[int]) -> Any:
    import numpy as np

    if dtype == np.bool_:
        return rng.integers(0, 2, size=dims).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 4, size=dims).astype(dtype)
    return rng.standard_normal(size=dims).astype(dtype)


def _answer(request: dict[str, Any], accepted: bool, stage: str, message: str, msgs: list[str], seconds: float) -> dict[str, Any]:
    def spec(s: dict[str, Any]) -> str:
        text = "x".join(map(str, s["dims"])) + f":{s['dtype']}"
        return text + (" (constant)" if s.get("values") is not None else "")

    return {"onnx_op": request["op"], "accepted": accepted, "stage": stage, "message": message, "qnn_messages": msgs[:20],
            "inputs": [spec(s) for s in request["inputs"]], "attributes": {k: str(v) for k, v in request.get("attrs", {}).items()},
            "soc_model": int(request["soc_model"]), "seconds": round(seconds, 3)}
