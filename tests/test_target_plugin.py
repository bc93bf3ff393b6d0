"""A new target is one class: a test double defined here, registered, and run by ``bisect`` through the public API.

The double runs each cut model on ONNX Runtime's CPU EP (real values of the model it is given; the fault is
injected into the *model*, as in the other bisect tests), so bisect finds the injected op only if it drives
the target through ``Target.prober`` and judges what the probes return.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import pytest

from qnn_debug import api, targets
from qnn_debug.errors import BadInputError
from qnn_debug.examples import deep_conv_net, small_cnn
from qnn_debug.inject import inject
from qnn_debug.targets.base import Capabilities, ProbeSetup, ProbeValues, Target


class OrtCpuDouble(Target):
    """TEST DOUBLE: a target that runs cut models on ORT CPU and cannot dump."""

    name: ClassVar[str] = "ort-cpu-double"
    description: ClassVar[str] = "test double: cut models on ONNX Runtime's CPU EP"
    capabilities: ClassVar[Capabilities] = Capabilities(dumps_every_tensor=False)

    def __init__(self) -> None:
        self.probed: list[list[str]] = []

    def prober(self, setup: ProbeSetup) -> OrtCpuDouble:
        return self

    def probe(self, model: onnx.ModelProto, outputs: list[str], inputs: dict[str, np.ndarray], *,
              reference: onnx.ModelProto | None = None, work: Path | None = None) -> ProbeValues:
        import onnxruntime as ort

        self.probed.append(list(outputs))
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        got = session.run(outputs, {k: v for k, v in inputs.items() if k in wanted})
        return ProbeValues(target=dict(zip(outputs, got, strict=True)))


@pytest.fixture
def double() -> Iterator[OrtCpuDouble]:
    target = targets.register(OrtCpuDouble())
    yield target
    targets.TARGETS.pop(target.name)


@pytest.mark.parametrize(("model", "node"), [(small_cnn(seed=1), "conv2"), (deep_conv_net(blocks=6, size=16, seed=6), "b3_conv")])
def test_bisect_drives_a_registered_target_to_the_injected_op(tmp_path: Path, double: OrtCpuDouble,
                                                               model: onnx.ModelProto, node: str) -> None:
    onnx.save(model, str(tmp_path / "model.onnx"))
    onnx.save(inject(model, "conv_on_zeros", node), str(tmp_path / "bug.onnx"))
    result = api.execute("bisect", {"model": str(tmp_path / "bug.onnx"), "reference_model": str(tmp_path / "model.onnx"),
                                    "target": double.name, "mnn_gate": False, "out": str(tmp_path / "out")})
    doc = result.model_dump()
    assert doc["target"] == double.name and doc["verdict"] == "real_bug", doc["summary"]
    assert doc["first_failing"]["op"] == node
    assert len(double.probed) == len(doc["probes"]) <= math.ceil(math.log2(doc["cut_points"])) + 1


def test_a_healthy_model_on_the_registered_target_blames_nothing(tmp_path: Path, double: OrtCpuDouble) -> None:
    onnx.save(small_cnn(seed=3), str(tmp_path / "m.onnx"))
    result = api.execute("bisect", {"model": str(tmp_path / "m.onnx"), "target": double.name, "mnn_gate": False,
                                    "out": str(tmp_path / "out")}).model_dump()
    assert result["verdict"] == "ok" and result["first_failing"] is None and len(double.probed) == 1


def test_what_the_registered_target_cannot_do_is_a_typed_error(tmp_path: Path, double: OrtCpuDouble) -> None:
    onnx.save(small_cnn(seed=3), str(tmp_path / "m.onnx"))
    with pytest.raises(BadInputError, match="cannot dump every tensor"):
        api.execute("dump", {"model": str(tmp_path / "m.onnx"), "target": double.name, "out": str(tmp_path / "d")})
    with pytest.raises(BadInputError, match="serial and options apply to target=device or target=host only"):
        api.execute("bisect", {"model": str(tmp_path / "m.onnx"), "target": double.name, "serial": "X1",
                               "out": str(tmp_path / "o")})
    targets.TARGETS.pop(double.name)
    with pytest.raises(BadInputError, match="unknown target 'ort-cpu-double'"):
        api.execute("bisect", {"model": str(tmp_path / "m.onnx"), "target": double.name, "out": str(tmp_path / "o")})
    targets.register(double)


@pytest.mark.parametrize(("model", "tensor"), [(small_cnn(seed=3), "c2"), (deep_conv_net(blocks=4, size=16, seed=4), None)])
def test_the_simulator_probes_one_cut_model_like_the_cpu_within_fp16(tmp_path: Path, model: onnx.ModelProto,
                                                                     tensor: str | None) -> None:
    """``htp-sim``'s prober (one cut per worker) answers the same interface the double does, with fp16 numbers."""
    from qnn_debug.compare.metrics import error_stats, metric_values
    from qnn_debug.localise.cut import truncate

    name = tensor or model.graph.node[len(model.graph.node) // 2].output[0]
    cut = truncate(model, [name])
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    inputs = {model.graph.input[0].name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    sim = targets.target("htp-sim").prober(ProbeSetup(work=tmp_path, soc_model=69)).probe(cut, [name], inputs)
    cpu = OrtCpuDouble().probe(cut, [name], inputs)
    assert sim.reference is None and sim.target[name].shape == cpu.target[name].shape
    sqnr = metric_values(error_stats(sim.target[name], cpu.target[name]))["sqnr_db"]
    assert sqnr is not None and 30.0 < sqnr < 200.0  # fp16 arithmetic: close to the CPU, never bit-identical
