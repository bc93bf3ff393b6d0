"""What do the structural triage layers cost on a large log? Triage with and without them, side by side.

The structure layers read only lines holding one of their literal anchors, at most ``max_lines_per_anchor`` per
anchor and 4 MiB chunk, so their cost is bounded whatever the log holds. The log mixes verbose QNN/ORT/ExecuTorch
lines, many of them with "error"/"failed"/"status" words, and a real failure at the end. Both runs are interleaved
and must give the same category (the failure line is a known wording). Target: with / without <= 1.3.

Run: ``python bench/triage_structure.py [--mb N] [--rounds N] [--json]``. Exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from unittest import mock

from qnn_debug.triage import triage_log
from qnn_debug.triage.structure import StructureScan

TARGET_RATIO = 1.3
LINES = (
    "2024-04-05 18:16:14.9941538 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ConstantFolding "
    "modified: 0 with status: OK\n",
    "[INFO] [Qnn ExecuTorch]:  <I> htpPerfInfrastructureSetPowerConfig done. status 0x0\n",
    "[WARNING] <W> Failed to create new env handle with error 1100\n",
    "load_tensors: offloaded 0/25 layers to GPU, error budget 0.01, return code 0\n",
    "I/litert  (26439): [npu_registry.cc:34] unsupported key 49 ignored, retrying dispatch\n",
)
FAILURE = "Status Message: QNN graph execute error. Error code: 6031\n"


def build_log(megabytes: int) -> str:
    block = "".join(LINES)
    return block * (megabytes * (1 << 20) // len(block)) + FAILURE


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    log = build_log(args.mb)
    with_s, without_s, cats = [], [], set()
    for _ in range(args.rounds):
        t = time.perf_counter()
        cats.add(triage_log(text=log).category)
        with_s.append(time.perf_counter() - t)
        with mock.patch.object(StructureScan, "feed", lambda self, text, base: None):
            t = time.perf_counter()
            cats.add(triage_log(text=log).category)
            without_s.append(time.perf_counter() - t)
    ratio = statistics.median(with_s) / statistics.median(without_s)
    ok = ratio <= TARGET_RATIO and len(cats) == 1
    out = {"mb": args.mb, "with_structure_s": round(statistics.median(with_s), 3),
           "without_structure_s": round(statistics.median(without_s), 3), "ratio": round(ratio, 3),
           "target": TARGET_RATIO, "same_category": len(cats) == 1, "ok": ok}
    print(json.dumps(out) if args.json else
          f"{args.mb} MB: with structure {out['with_structure_s']} s, without {out['without_structure_s']} s, "
          f"ratio {out['ratio']} (target <= {TARGET_RATIO}); same category: {out['same_category']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
