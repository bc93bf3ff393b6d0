"""Time to the first failing op in an LLM decoder: block localisation vs bisection over the whole graph.

Model: the project's tiny Qwen3-shaped decoder (``qnn_debug_testkit.tiny_graph``, torch export form) with
``--layers`` layers (default 8) and one faulty layer (default: ``wrong_rotary`` — rotate_half without its
Neg — in layer 5), prefill of 32 tokens, on the HTP simulator (soc 69, fp16).

- **block localisation** (``qnn_debug.localise.blocks.run_blocks``): every decoder block cut out and run
  alone on the reference hidden state (one simulator process), the first bad block then searched inside
  (every op of that block alone on reference inputs, side by side in one session; ``--inner bisect`` or
  ``--inner diagnose`` add a search of the cut-out block);
- **bisection** (``qnn_debug.localise.bisect.run_bisect``, the real ``qnn-debug bisect``) over the whole
  graph: ~log2(N) truncated models, each run unmarked on the simulator.

The final ``Slice`` on llmexport's ``logits_index`` input is dynamic, which QNN rejects; both sides get
the same model with ``logits_index`` baked in as a constant (the prefill's last token), as a user does
before running the whole graph on the simulator. Block localisation never needs that.

Ratio = bisection time / block time; target >= 3 with the same first failing op.
Run: ``python bench/llm_block.py [--layers 8] [--fault-layer 5] [--inner bisect] [--rounds 1] [--json]``.
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

TARGET_RATIO = 3.0


def build(root: Path, layers: int, fault_layer: int, seq: int) -> tuple[Path, Path, Path, Path, Path]:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from qnn_debug_testkit.tiny_graph import (
        GraphFaults,
        TinyQwen3Config,
        build_graph,
        make_weights,
        prefill_inputs,
    )

    cfg = TinyQwen3Config(layers=layers)
    w = make_weights(cfg)
    clean = build_graph(cfg, w, seq_len=seq)
    bug = build_graph(cfg, w, seq_len=seq, faults=GraphFaults(wrong_rotary_layer=fault_layer))
    feeds = prefill_inputs(cfg, w, [int(i) for i in np.random.default_rng(1).integers(0, 256, size=seq)])
    onnx.save(clean, str(root / "llm.onnx"))
    onnx.save(bug, str(root / "llm_bug.onnx"))
    np.savez(root / "prefill.npz", **feeds)
    index = feeds.pop("logits_index")
    for model, name in ((clean, "llm_static.onnx"), (bug, "llm_bug_static.onnx")):
        keep = [i for i in model.graph.input if i.name != "logits_index"]
        del model.graph.input[:]
        model.graph.input.extend(keep)
        model.graph.initializer.append(numpy_helper.from_array(index, "logits_index"))
        onnx.save(model, str(root / name))
    np.savez(root / "prefill_static.npz", **feeds)
    return root / "llm.onnx", root / "llm_bug.onnx", root / "llm_static.onnx", root / "llm_bug_static.onnx", root / "prefill.npz"


def by_blocks(clean: Path, bug: Path, inputs: Path, out: Path, inner: str) -> dict[str, Any]:
    from qnn_debug.localise.blocks import BlockRequest, run_blocks

    t0 = time.perf_counter()
    r = run_blocks(BlockRequest(model=bug, reference_model=clean, inputs=inputs, out=out, inner=inner))  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    ff = r.first_failing
    return {"seconds": seconds, "answer": ff.op if ff else None, "block": r.first_failing_block.first
            if r.first_failing_block else None, "timings": r.timings}


def by_bisection(clean: Path, bug: Path, inputs: Path, out: Path) -> dict[str, Any]:
    from qnn_debug.localise.bisect import BisectRequest, run_bisect

    t0 = time.perf_counter()
    r = run_bisect(BisectRequest(model=bug, reference_model=clean, inputs=inputs, out=out, mnn_gate=False))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "answer": r.first_failing.op if r.first_failing else None, "probes": len(r.probes),
            "cuts": r.cut_points}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--fault-layer", type=int, default=5)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--inner", choices=["none", "bisect", "diagnose"], default="none")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds; each side's best time is used")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qnn-debug-bench-llm-"))
    try:
        clean, bug, clean_static, bug_static, inputs = build(root, args.layers, args.fault_layer, args.seq)
        blocks, bisects = [], []
        for r in range(args.rounds):
            blocks.append(by_blocks(clean, bug, inputs, root / f"blocks{r}", args.inner))
            bisects.append(by_bisection(clean_static, bug_static, root / "prefill_static.npz", root / f"bisect{r}"))
        blk, bis = min(blocks, key=lambda x: x["seconds"]), min(bisects, key=lambda x: x["seconds"])
        ratio = bis["seconds"] / blk["seconds"]
        same = blk["answer"] == bis["answer"] and blk["answer"] is not None
        right_layer = f"/layers.{args.fault_layer}/" in (blk["answer"] or "")
        ok = ratio >= TARGET_RATIO and same and right_layer
        report = {"layers": args.layers, "fault": f"wrong_rotary@layer{args.fault_layer}", "inner": args.inner,
                  "block_s": round(blk["seconds"], 2), "bisection_s": round(bis["seconds"], 2), "ratio": round(ratio, 2),
                  "block_answer": blk["answer"], "bisection_answer": bis["answer"], "same_answer": same,
                  "right_layer": right_layer, "bisection_probes": bis["probes"], "bisection_cuts": bis["cuts"],
                  "block_timings": blk["timings"], "target": {"ratio": f">= {TARGET_RATIO}", "met": ok}}
        if args.json:
            print(json.dumps(report))
        else:
            print(f"llm_block: tiny Qwen3 decoder, {args.layers} layers, wrong rotary in layer {args.fault_layer}")
            print(f"  block localisation (inner {args.inner}): {report['block_s']} s -> {blk['answer']} "
                  f"(block {blk['block']}; {blk['timings']})")
            print(f"  bisection over the whole graph ({bis['probes']} probes over {bis['cuts']} cuts): "
                  f"{report['bisection_s']} s -> {bis['answer']}")
            print(f"  ratio {report['ratio']}x (target >= {TARGET_RATIO}), same answer: {same}, right layer: {right_layer}")
            print("  " + ("target met" if ok else "TARGET MISSED"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
