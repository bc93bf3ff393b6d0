"""Time to the first failing op: one all-tensor run + compare vs the real ``qnn-debug bisect``.

Model: ``qnn_debug.examples.deep_conv_net()`` (24 blocks, 90 ops) with one injected bug (default: the
conv ``b11_conv`` reads zeros — MNN's "output equals bias" symptom), run on the HTP simulator.

- **one-shot** (``qnn-debug diagnose``): baseline (ORT fp32 reference, fp16 floor, MNN CPU gate) and one
  all-tensor htp-sim dump side by side, then ``compare`` (metrics, localisation, local re-run, pattern
  tests, verdict).
- **bisection** (``qnn-debug bisect``, :func:`qnn_debug.localise.bisect.run_bisect`): the same baseline,
  then about log2(N) + 1 truncated models (each cut after one op, its frontier as outputs) run unmarked on
  the simulator in one worker process, each judged against the floor by the verdict's own jump gate.
  Until this command existed the benchmark imitated MNN's ``qnn_probe.sh`` workflow (a process per
  step); that imitation is gone: both sides are now the product's own commands.

Ratio = bisection time / one-shot time (above 1: the dump is faster). Both must name the injected op.
Run: ``python bench/first_failing_op.py [--bug KIND@NODE] [--rounds N] [--json]``; exits 1 if an answer is wrong.
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


def bisection(original_path: Path, edited_path: Path, inputs: Path, work: Path) -> dict[str, Any]:
    """The real ``qnn-debug bisect`` (engine API), with the diagnose's own baseline settings."""
    from qnn_debug.localise.bisect import BisectRequest, run_bisect

    start = time.perf_counter()
    result = run_bisect(BisectRequest(model=edited_path, reference_model=original_path, inputs=inputs, out=work,
                                      force=True))
    seconds = time.perf_counter() - start
    ff = result.first_failing
    probes = [{"tensor": ", ".join(p.bad_tensors[:1]) or (p.worst.name if p.worst else p.op), "op": p.op,
               "bad": p.bad, "excess_db": p.worst.excess_db if p.worst else None, "total_s": p.seconds}
              for p in result.probes]
    return {"seconds": seconds, "answer": ff.op if ff else None, "probes": probes, "cuts": result.cut_points}


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
    args = ap.parse_args()

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
        ok = same
        report["target"] = {"same_answer": True, "met": ok}
        if args.json:
            print(json.dumps(report))
        else:
            print(f"first_failing_op: deep_conv_net ({report['model_ops']} ops), bug {args.bug}")
            print(f"  one-shot (baseline || htp-sim dump, then compare): {report['one_shot_s']} s -> "
                  f"{shot['answer']} ({report['verdict']}); {shot['timings']}")
            print(f"  bisection (qnn-debug bisect, {report['probes']} probes over {bis['cuts']} cuts): "
                  f"{report['bisection_s']} s -> {bis['answer']}")
            for p in bis["probes"]:
                print(f"    cut after {p['op']:<12} -> {'bad' if p['bad'] else 'ok '} (worst excess {p['excess_db']} dB, "
                      f"{p['total_s']} s)")
            print(f"  ratio bisection/one-shot {report['ratio']}x, same answer: {same}")
            print("  " + ("same answer" if ok else "ANSWERS DIFFER"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
