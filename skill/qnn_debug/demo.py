"""``qnn-debug demo``: the whole engine on a model the project builds itself, as a list of plain steps.

Steps (each adds one :class:`DemoStep`): build the bundled example model, build its trusted
baseline, dump every tensor on the HTP simulator with the baseline's inputs, diagnose that healthy run,
then inject one bug, dump it and check that the diagnosis names the injected op. The steps only call
the engine's public operations (baseline, dump, compare); nothing below imports the demo.
Re-running the demo replaces its own previous output in ``out`` and nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .progress import NULL_PROGRESS, Progress
from .runstore import INPUTS_FILE, atomic_write_text, check_output_dir, remove_entries

DEMO_FILE = "demo.json"
MODEL_FILE = "model.onnx"
BASELINE_DIR = "baseline"
HTP_DIR = "htp-sim"
DEMO_BUG = ("conv_on_zeros", "b3_conv")  # the classic MNN symptom: one conv's output is just its bias
DIAGNOSIS_ENTRIES = ("report", "model_bug.onnx", "htp-sim-bug", "report-bug")
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
                                  inputs=ctx.baseline / INPUTS_FILE), ctx.progress)
    from .compare import fmt

    effect = ", ".join(f"{k} {fmt.observer(v)}" for k, v in (result.observer_effect_db or {}).items())
    return DemoStep(name="htp-sim dump", path=result.out,
                    summary=f"{result.tensors} tensors from the HTP simulator, {result.qnn_nodes} nodes on QNN, "
                            f"none on CPU; observer effect (marked vs unmarked): {effect}",
                    details=result.model_dump(mode="json"))


def step_diagnose_healthy(ctx: DemoContext) -> DemoStep:
    """Compare the healthy htp-sim dump with the baseline: the verdict should be ok or precision."""
    from .compare.pipeline import compare_paths

    result = compare_paths(ctx.baseline, ctx.htp, report_dir=ctx.out / "report", progress=ctx.progress)
    v = result.verdict
    return DemoStep(name="diagnose healthy run", path=result.report_files.get("markdown"),
                    summary=f"verdict {v.kind} — {v.summary}",
                    details={"verdict": v.model_dump(mode="json"), "first_failing": None})


def step_diagnose_bug(ctx: DemoContext) -> DemoStep:
    """Inject one bug into the example, dump it on the simulator, and check the diagnosis names it."""
    import onnx

    from .compare.pipeline import compare_paths
    from .dump import run_dump
    from .inject import inject
    from .targets import DumpRequest

    kind, node = DEMO_BUG
    edited = ctx.out / "model_bug.onnx"
    onnx.save(inject(onnx.load(str(ctx.model)), kind, node), str(edited))
    run_dump(DumpRequest(model=edited, out=ctx.out / "htp-sim-bug", inputs=ctx.baseline / INPUTS_FILE), ctx.progress)
    result = compare_paths(ctx.baseline, ctx.out / "htp-sim-bug", report_dir=ctx.out / "report-bug",
                           progress=ctx.progress)
    v, ff = result.verdict, result.first_failing
    found = ff.op if ff is not None else None
    mark = "right answer" if found == node and v.kind == "real_bug" else f"WRONG ANSWER (expected {node})"
    return DemoStep(name="diagnose injected bug", path=result.report_files.get("markdown"),
                    summary=f"injected {kind} at {node}; verdict {v.kind}/{v.pattern} at {found} ({mark}) — {v.summary}",
                    details={"injected": {"kind": kind, "node": node}, "verdict": v.model_dump(mode="json"),
                             "first_failing": ff.model_dump(mode="json") if ff else None,
                             "right_answer": found == node and v.kind == "real_bug"})


STEPS: list[StepFn] = [step_build_model, step_baseline, step_htp_dump, step_diagnose_healthy, step_diagnose_bug]


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
        remove_entries(out, OWN_ENTRIES)
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()
