"""Time to the first failing op: one all-tensor run + compare vs MNN's ``qnn_probe.sh`` bisection.

Model: ``qnn_debug.examples.deep_conv_net()`` (24 blocks, 90 ops) with one injected bug (default: the
conv ``b11_conv`` reads zeros — MNN's "output equals bias" symptom), run on the HTP simulator.

- **one-shot** (this project): ``qnn_debug.diagnose.diagnose`` — baseline (ORT fp32 reference, fp16 floor,
  MNN CPU gate) and one all-tensor htp-sim dump side by side, then ``compare`` (metrics, localisation,
  local re-run, pattern tests, verdict).
- **bisection** (MNN's ``skills/qnn-debug/scripts/qnn_probe.sh`` workflow, with the same simulator): the
  final output is known bad; each probe truncates the model at the midpoint tensor of the remaining
  range and does what the script does, per probe:
  1. ``testMNNFromOnnx.py <model> <tensor>``: a Python process that truncates, runs the ONNX Runtime
     reference and starts the MNN converter's CPU check (here: a child of this script + the MNN worker);
  2. ``ModuleBasic.out`` with forward type 5 (QNN fp16): the truncated model on the HTP simulator in a
     fresh process, forwarded 3 times as ModuleBasic does (2 checked repeats + 1 timed loop);
  3. ``ModuleBasic.out`` with forward type 0 at fp32: MNN CPU in a fresh process;
  4. ``ModuleBasic.out`` at fp16 on CPU: replaced by the ORT fp16 floor in this process (MNN computes
     "low precision" in fp32 on x86), which is cheaper than the script's process.
  A jump of the QNN error beyond the CPU fp16 floor (the verdict's own 15 dB gate) marks the probe bad.
  The script's small JSON-editing Python process and ``adb push`` are left out. About log2(90) = 7 probes.

Ratio = bisection time / one-shot time; target >= 5 with the same first failing op.
Run: ``python bench/first_failing_op.py [--bug KIND@NODE] [--rounds N] [--json]``; exits 1 if missed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_RATIO = 5.0
JUMP_DB = 15.0  # the verdict's own jump gate, so both sides judge "bad" alike
FLOOR_CAP_DB = 60.0


MODULEBASIC_FORWARDS = 3  # ``ModuleBasic.out m dir 0 5 1 4 2``: repeat (default 2) checked runs + runLoops 1


def child_htp(model: str, inputs: str, out: str) -> None:
    """A QNN run of a truncated model in a fresh process, as ``ModuleBasic.out`` does on a device."""
    import numpy as np

    from qnn_debug.mnn.soc import DEFAULT_SOC
    from qnn_debug.targets import qnn_ep

    feeds = dict(np.load(inputs))
    info = qnn_ep.create_session(Path(model).read_bytes(), qnn_ep.provider_options(DEFAULT_SOC, None), verbose=False)
    names = [o.name for o in info.session.get_outputs()]
    for _ in range(MODULEBASIC_FORWARDS):
        result = info.session.run(names, feeds)[0]
    np.save(out, result)


def truncate(model: Any, tensor: str) -> Any:
    """``testMNNFromOnnx.py model.onnx <tensor>``: the graph's outputs replaced by that tensor."""
    import copy

    from onnx import TensorProto, helper, utils

    m = copy.deepcopy(model)
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None))
    return utils.Extractor(m).extract_model([i.name for i in m.graph.input], [tensor])


def sqnr(test: Any, ref: Any) -> float:
    """SQNR of ``test`` against ``ref`` by the project's one comparator (capped at 200 dB for identical)."""
    from qnn_debug.compare.metrics import error_stats, sqnr_db

    stats = error_stats(test, ref, wide=True)
    return sqnr_db(stats.sum_r2, stats.sum_d2)


def child_testmnn(model: str, tensor: str, inputs: str, out: str) -> None:
    """``testMNNFromOnnx.py <model> <tensor>`` in its own interpreter: truncate, ORT reference, then the
    MNN converter's CPU check (here the MNN worker process, as MNNConvert is a process of its own)."""
    import numpy as np
    import onnx

    from qnn_debug.inputs import prepare_inputs
    from qnn_debug.onnx_graph import graph_inputs
    from qnn_debug.targets.mnn_cpu import run_mnn_cpu
    from qnn_debug.targets.onnx_capture import run_on_cpu

    d = Path(out)
    cut = truncate(onnx.load(model), tensor)
    onnx.save(cut, str(d / "test.onnx"))
    prepared = prepare_inputs(graph_inputs(cut), inputs=inputs)
    np.save(d / "ref.npy", run_on_cpu(cut, prepared.arrays, [tensor])[tensor])
    run_mnn_cpu(d / "test.onnx", prepared, d / "convert", role="mnn_cpu", onnx_model=cut)


def probe(edited: Any, model_path: Path, tensor: str, inputs: Path, work: Path) -> dict[str, Any]:
    """One qnn_probe.sh probe at ``tensor``; returns timings and whether QNN is bad there."""
    import subprocess

    import numpy as np
    import onnx

    from qnn_debug.inputs import prepare_inputs
    from qnn_debug.onnx_graph import fp16_floor, graph_inputs
    from qnn_debug.targets.mnn_cpu import run_mnn_cpu
    from qnn_debug.targets.onnx_capture import run_on_cpu

    def child(*args: str) -> None:
        subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True)

    t0 = time.perf_counter()
    d = work / tensor.replace("/", "_")
    d.mkdir(parents=True, exist_ok=True)
    child("--child-testmnn", str(model_path), tensor, str(inputs), str(d))  # truncate + ORT + convert + check
    ref = np.load(d / "ref.npy")
    onnx.save(truncate(edited, tensor), str(d / "test_qnn.onnx"))  # the device's model carries the bug
    t1 = time.perf_counter()
    child("--child-htp", str(d / "test_qnn.onnx"), str(inputs), str(d / "qnn.npy"))  # ModuleBasic fwd 5 (QNN fp16)
    qnn = np.load(d / "qnn.npy").reshape(ref.shape)
    t2 = time.perf_counter()
    cut = onnx.load(str(d / "test.onnx"))
    prepared = prepare_inputs(graph_inputs(cut), inputs=inputs)
    mnn = run_mnn_cpu(d / "convert" / "model.mnn", prepared, d / "cpu32", role="mnn_cpu")  # ModuleBasic fwd 0, fp32
    mnn_out = np.asarray(mnn.array(tensor)).reshape(ref.shape)
    t3 = time.perf_counter()
    floor = run_on_cpu(fp16_floor(cut), prepared.arrays, [tensor])[tensor]  # CPU fp16
    qnn_db, floor_db, mnn_db = sqnr(qnn, ref), sqnr(floor, ref), sqnr(mnn_out, ref)
    bad = min(floor_db, FLOOR_CAP_DB) - qnn_db >= JUMP_DB
    return {"tensor": tensor, "qnn_db": round(qnn_db, 1), "cpu_fp16_db": round(floor_db, 1),
            "cpu_fp32_mnn_db": round(mnn_db, 1), "bad": bad, "convert_check_s": round(t1 - t0, 2),
            "qnn_s": round(t2 - t1, 2), "cpu_fp32_s": round(t3 - t2, 2), "total_s": round(time.perf_counter() - t0, 2)}


def bisection(original_path: Path, edited_path: Path, inputs: Path, work: Path) -> dict[str, Any]:
    import onnx

    from qnn_debug.onnx_graph import nodes_in_order, producer_map

    original, edited = onnx.load(str(original_path)), onnx.load(str(edited_path))
    order = [o for n in nodes_in_order(original) for o in n.outputs]
    start = time.perf_counter()
    lo, hi = -1, len(order) - 1  # the graph input is good; the final output is the known-bad symptom
    probes = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = probe(edited, original_path, order[mid], inputs, work)
        probes.append(p)
        lo, hi = (lo, mid) if p["bad"] else (mid, hi)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "answer": producer_map(original)[order[hi]].name, "probes": probes}


def one_shot(original_path: Path, edited_path: Path, inputs: Path, work: Path) -> dict[str, Any]:
    from qnn_debug.diagnose import diagnose

    start = time.perf_counter()
    result = diagnose(edited_path, work, reference_model=original_path, inputs=inputs, force=True)
    seconds = time.perf_counter() - start
    ff = result.compare.first_failing
    return {"seconds": seconds, "answer": ff.op if ff else None, "verdict": result.compare.verdict.kind,
            "pattern": result.compare.verdict.pattern, "timings": result.timings}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bug", default="conv_on_zeros@b11_conv", help="INJECTION@NODE (see qnn_debug.inject)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds; each side's best time is used (the machine is shared and noisy)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child-htp", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--child-testmnn", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_htp:
        child_htp(*args.child_htp)
        return 0
    if args.child_testmnn:
        child_testmnn(*args.child_testmnn)
        return 0

    import numpy as np
    import onnx

    from qnn_debug.examples import deep_conv_net
    from qnn_debug.inject import inject

    kind, node = args.bug.split("@")
    root = Path(tempfile.mkdtemp(prefix="qnn-debug-bench-ffo-"))
    try:
        model = deep_conv_net()
        onnx.save(model, str(root / "model.onnx"))
        onnx.save(inject(model, kind, node), str(root / "model_bug.onnx"))
        np.savez(root / "inputs.npz", x=np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32))
        shots, bisects = [], []
        for r in range(args.rounds):  # interleaved, so machine load affects both alike
            shots.append(one_shot(root / "model.onnx", root / "model_bug.onnx", root / "inputs.npz", root / f"shot{r}"))
            bisects.append(bisection(root / "model.onnx", root / "model_bug.onnx", root / "inputs.npz", root / f"bisect{r}"))
        shot, bis = min(shots, key=lambda x: x["seconds"]), min(bisects, key=lambda x: x["seconds"])
        ratio = bis["seconds"] / shot["seconds"]
        same = shot["answer"] == bis["answer"] == node
        report = {"model_ops": len(model.graph.node), "bug": args.bug, "one_shot_s": round(shot["seconds"], 2),
                  "bisection_s": round(bis["seconds"], 2), "ratio": round(ratio, 2), "probes": len(bis["probes"]),
                  "one_shot_answer": shot["answer"], "bisection_answer": bis["answer"], "same_answer": same,
                  "verdict": f"{shot['verdict']}/{shot['pattern']}", "one_shot_timings": shot["timings"],
                  "probe_details": bis["probes"], "all_one_shot_s": [round(s["seconds"], 2) for s in shots],
                  "all_bisection_s": [round(b["seconds"], 2) for b in bisects]}
        ok = ratio >= TARGET_RATIO and same
        report["target"] = {"ratio": f">= {TARGET_RATIO}", "same_answer": True, "met": ok}
        if args.json:
            print(json.dumps(report))
        else:
            print(f"first_failing_op: deep_conv_net ({report['model_ops']} ops), bug {args.bug}")
            print(f"  one-shot (baseline || htp-sim dump, then compare): {report['one_shot_s']} s -> "
                  f"{shot['answer']} ({report['verdict']}); {shot['timings']}")
            print(f"  bisection (qnn_probe.sh workflow, {report['probes']} probes): {report['bisection_s']} s -> {bis['answer']}")
            for p in bis["probes"]:
                print(f"    probe {p['tensor']:<12} QNN {p['qnn_db']:>6} dB, CPU-fp16 {p['cpu_fp16_db']:>6} dB -> "
                      f"{'bad' if p['bad'] else 'ok '} ({p['total_s']} s: convert+check {p['convert_check_s']} s, "
                      f"QNN {p['qnn_s']} s, CPU fp32 {p['cpu_fp32_s']} s)")
            print(f"  ratio {report['ratio']}x (target >= {TARGET_RATIO}), same answer: {same}")
            print("  " + ("target met" if ok else "TARGET MISSED"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
