"""``qnn-debug demo``: the whole engine on a model the project builds itself, as a list of plain steps.

Steps (each adds one :class:`DemoStep`): build the bundled example model, build its trusted
baseline, dump every tensor on the HTP simulator with the baseline's inputs. Later steps (diagnosis
of a healthy and of an injected-bug run) are appended to :data:`STEPS` by the modules that own them.
Re-running the demo replaces its own previous output in ``out`` and nothing else.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .diagnose import DEMO_ENTRIES as DIAGNOSIS_ENTRIES
from .diagnose import demo_steps as diagnosis_steps
from .progress import NULL_PROGRESS, Progress
from .runstore import atomic_write_text, check_output_dir

DEMO_FILE = "demo.json"
MODEL_FILE = "model.onnx"
BASELINE_DIR = "baseline"
HTP_DIR = "htp-sim"
OWN_ENTRIES = (DEMO_FILE, MODEL_FILE, BASELINE_DIR, HTP_DIR, *DIAGNOSIS_ENTRIES)


class DemoStep(BaseModel):
    name: str
    summary: str  # one line saying what the step produced
    path: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class DemoResult(BaseModel):
    out: str
    steps: list[DemoStep] = Field(default_factory=list)
    finished: bool = False


class DemoContext:
    """What steps share: the output directory, progress, and paths earlier steps produced."""

    def __init__(self, out: Path, progress: Progress):
        self.out = out
        self.progress = progress
        self.model = out / MODEL_FILE
        self.baseline = out / BASELINE_DIR
        self.htp = out / HTP_DIR


StepFn = Callable[[DemoContext], DemoStep]


def step_build_model(ctx: DemoContext) -> DemoStep:
    """An 8-block conv net (Conv/BN/Add/Relu, GAP, Gemm, Softmax) built with onnx.helper."""
    import onnx

    from .examples import deep_conv_net

    model = deep_conv_net(blocks=8)
    onnx.save(model, str(ctx.model))
    return DemoStep(name="build model", path=str(ctx.model),
                    summary=f"built {model.graph.name}: {len(model.graph.node)} nodes, input x[1,3,32,32]")


def step_baseline(ctx: DemoContext) -> DemoStep:
    """ORT CPU fp32 reference, fp16 floor and MNN CPU gate on seeded inputs."""
    from .baseline import run_baseline

    result = run_baseline(ctx.model, ctx.baseline, progress=ctx.progress)
    r = result.report
    gate = (f"MNN CPU vs ORT max rel error {r.gate.max_rel_error:.1e}" if r.gate.max_rel_error is not None
            else f"gate {r.gate.status}")
    return DemoStep(name="baseline", path=result.out,
                    summary=f"{result.tensors.get('reference', 0)} reference tensors, "
                            f"{result.tensors.get('fp16_floor', 0)} floor tensors; {gate}; "
                            f"{'trusted' if r.trusted else 'NOT trusted'}",
                    details={"trusted": r.trusted, "sentence": r.sentence, "tensors": result.tensors})


def step_htp_dump(ctx: DemoContext) -> DemoStep:
    """Every tensor on the HTP simulator (soc 69, fp16), fed the baseline's exact inputs."""
    from .dump import run_dump
    from .targets import DumpRequest

    result = run_dump(DumpRequest(model=ctx.model, out=ctx.htp, target="htp-sim", precision="fp16",
                                  inputs=ctx.baseline / "inputs.npz"), ctx.progress)
    from .compare import fmt

    effect = ", ".join(f"{k} {fmt.observer(v)}" for k, v in (result.observer_effect_db or {}).items())
    return DemoStep(name="htp-sim dump", path=result.out,
                    summary=f"{result.tensors} tensors from the HTP simulator, {result.qnn_nodes} nodes on QNN, "
                            f"none on CPU; observer effect (marked vs unmarked): {effect}",
                    details=result.model_dump(mode="json"))


STEPS: list[StepFn] = [step_build_model, step_baseline, step_htp_dump, *diagnosis_steps()]


def run_demo(out: str | os.PathLike[str], *, progress: Progress = NULL_PROGRESS) -> DemoResult:
    """Run every step in :data:`STEPS` into ``out``; ``demo.json`` records the steps as they finish."""
    out_dir = _prepare(Path(out))
    ctx = DemoContext(out_dir, progress)
    result = DemoResult(out=str(out_dir))
    _save(result)
    for step in STEPS:
        result.steps.append(step(ctx))
        _save(result)
    result.finished = True
    _save(result)
    return result


def _save(result: DemoResult) -> None:
    atomic_write_text(Path(result.out) / DEMO_FILE, result.model_dump_json(indent=1))


def _prepare(out: Path) -> Path:
    """Create ``out`` or clear a previous demo there; never touch a directory the demo did not write."""
    if check_output_dir(out, force=True, is_ours=lambda p: (p / DEMO_FILE).exists(), what="demo"):
        for name in OWN_ENTRIES:
            entry = out / name
            if entry.is_dir():
                shutil.rmtree(entry)
            elif entry.exists():
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()
