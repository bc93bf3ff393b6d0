"""The comparison's stages called one by one give the verdict ``compare_paths`` gives.

align → metrics → localise → local re-run → patterns → verdict → wording, each a public call with typed
inputs and outputs: a small CNN, its baseline, and a target run of the same network with one op broken
(or none), made on ONNX Runtime CPU and brought as an ``.npz`` (no simulator needed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from qnn_debug.baseline import run_baseline
from qnn_debug.compare import rules
from qnn_debug.compare.align import align_runs
from qnn_debug.compare.checks import rerun_suspects
from qnn_debug.compare.importers import open_reference, open_target
from qnn_debug.compare.localise import localise
from qnn_debug.compare.options import CompareOptions
from qnn_debug.compare.pattern_stage import find_patterns
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.compare.rows import measure
from qnn_debug.compare.verdict import Findings, name_on_target, note_unchecked
from qnn_debug.examples import small_cnn
from qnn_debug.inject import inject
from qnn_debug.onnx_graph import load_onnx, mark_all, producer_map


def _target_npz(model: onnx.ModelProto, inputs: Path, out: Path) -> Path:
    """Every tensor of ``model`` on ONNX Runtime CPU, named as the model names them."""
    feeds = dict(np.load(inputs))
    sess = ort.InferenceSession(mark_all(model).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    np.savez(out, **feeds, **dict(zip(names, sess.run(None, feeds), strict=True)))
    return out


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stages")
    onnx.save(small_cnn(), str(root / "cnn.onnx"))
    run_baseline(root / "cnn.onnx", root / "base")  # gated: an untrusted reference would head the summary
    return root


@pytest.mark.parametrize(("case", "kind"), [("conv_on_zeros", "real_bug"), ("healthy", "ok")])
def test_stages_one_by_one_give_the_verdict_of_compare_paths(baseline: Path, tmp_path: Path, case: str,
                                                             kind: str) -> None:
    net = small_cnn() if case == "healthy" else inject(small_cnn(), case, "conv2")
    npz = _target_npz(net, baseline / "base" / "inputs.npz", tmp_path / f"{case}.npz")
    whole = compare_paths(baseline / "base", npz)
    assert whole.verdict.kind == kind, whole.verdict.summary

    opts = CompareOptions()
    th = opts.thresholds
    side = open_reference(baseline / "base")
    ref = side.reference
    target, target_kind = open_target(npz, reference=ref, work_dir=tmp_path / "imported")
    model = load_onnx(baseline / "cnn.onnx")
    aligned = align_runs(ref, target, side.floor, producers=producer_map(model))                 # 1. align
    measured = measure(side, target, aligned, opts, model=model, backend=target_kind == "mnn-dump")  # 2. metrics
    located = localise(model, ref, measured.rows, th)                                              # 3. localise
    rerun = rerun_suspects(located, ref, target, measured.rows, quantized=measured.quantized, th=th)  # 4. re-run
    patterns = find_patterns(rerun, measured, located, ref, target)                                # 5. patterns
    findings = Findings.gather(measured, located, rerun, patterns, outputs=list(ref.record.outputs),
                               observer_effect_db=target.record.observer_effect_db, has_floor=side.floor is not None)
    decision = rules.decide(findings, th)                                                          # 6. verdict
    decision = name_on_target(decision, target, located.ops, located.graph_tensors(measured.rows))
    decision = note_unchecked(decision, located.suspects, len(rerun.findings))
    verdict = rules.verdict(decision, findings, th)                                               # 7. wording

    assert (decision.kind, decision.pattern, decision.confidence) == (
        whole.verdict.kind, whole.verdict.pattern, whole.verdict.confidence)
    # the probe's arguments are added after the stages, from the model (compare.pipeline._mark_target_model)
    whole_first = whole.first_failing.model_copy(update={"probe": []}) if whole.first_failing else None
    assert decision.first == whole_first
    evidence = dict(verdict.evidence)
    note = target.record.extra.get("observer_effect")  # a plain dump's observer effect (or why not), added after
    if isinstance(note, str):
        evidence["observer_effect"] = note
    # after the stages the pipeline also says, per output, whether the fp16 floor meets ModuleBasic's rule
    after = {"floor_diff_rate", "modulebasic_rule_met_by_floor"}
    whole_evidence = dict(whole.verdict.evidence)
    whole_evidence["end_to_end"] = {name: {k: v for k, v in entry.items() if k not in after}
                                    for name, entry in whole_evidence["end_to_end"].items()}
    assert verdict.summary == whole.verdict.summary and evidence == whole_evidence
    assert not hasattr(decision, "summary")  # the verdict stage decides; only the wording stage writes
    if kind == "real_bug":
        assert rerun.confirmed is not None and rerun.confirmed.finding.best is not None
        assert decision.first is not None and decision.first.op == "conv2" and decision.pattern != "none"
        assert "conv2" in verdict.summary and isinstance(decision.evidence["local_sqnr_db"], float)
    else:
        assert not located.suspects and decision.first is None
