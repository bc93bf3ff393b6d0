"""How much does matching QNN error numbers code-first (with a ``before`` context check) save over context-first?

The QNN error-number signatures (``qnn-code-*``) need their context ("error", "status", "failed" …) before the
number. Written context-first, the pattern starts with a case-insensitive alternation that is tried at every
position of every chunk whose anchors occur, and "rr"/"ail" occur in nearly every verbose log. Written
code-first, the pattern starts with a literal the regex engine can skip to, and the context is checked only at
the few places the number occurs. Both forms are timed side by side on the same log, interleaved, and must find
the same hits. Target: code-first time / context-first time <= 0.5.

Run: ``python bench/triage_codes.py [--mb N] [--rounds N] [--json]``. Exits 1 when the target is missed or the
two forms disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time

from qnn_debug.triage.signatures import Signature, load_signatures

TARGET_RATIO = 0.5
LINES = (
    "2024-04-05 18:16:14.9941538 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ConstantFolding "
    "modified: 0 with status: OK\n",
    "[INFO] [Qnn ExecuTorch]:  <I> htpPerfInfrastructureSetPowerConfig done. status 0x0\n",
    "W/litert  (26439): [npu_registry.cc:34] NPU accelerator could not be loaded: kLiteRtStatusErrorNotFound retry\n",
    "[WARNING] <W> Failed to create new env handle with error 1100\n",
)
HITS = (
    "QnnDevice_create failed, error: 14001\n",
    "Status Message: QNN graph execute error. Error code: 6031\n",
    "context create returned 5005\n",
)


def build_log(megabytes: int) -> str:
    body = "".join(LINES)
    reps = megabytes * 1_000_000 // len(body)
    return body * (reps // 2) + "".join(HITS) + body * (reps - reps // 2)


def context_first(sig: Signature) -> re.Pattern[str]:
    """The same signature written the slow way: its ``before`` context glued in front of the pattern."""
    assert sig.before is not None
    return re.compile(sig.before.removesuffix("\\Z") + sig.pattern, re.MULTILINE)


def hits_context_first(rx: re.Pattern[str], text: str) -> list[str]:
    return [m.group("code") for m in rx.finditer(text)]


def hits_code_first(sig: Signature, text: str) -> list[str]:
    return [m.group("code") for m in sig.regex.finditer(text) if sig.context_ok(text, m.start())]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    text = build_log(args.mb)
    sigs = [s for s in load_signatures().signatures if s.before is not None]
    slow = {s.id: context_first(s) for s in sigs}
    t_slow: list[float] = []
    t_fast: list[float] = []
    agree = True
    for _ in range(args.rounds):
        start = time.perf_counter()
        a = {s.id: hits_context_first(slow[s.id], text) for s in sigs}
        t_slow.append(time.perf_counter() - start)
        start = time.perf_counter()
        b = {s.id: hits_code_first(s, text) for s in sigs}
        t_fast.append(time.perf_counter() - start)
        agree = agree and a == b
    ratio = statistics.median(t_fast) / statistics.median(t_slow)
    result = {"log_mb": args.mb, "signatures": len(sigs), "context_first_s": round(statistics.median(t_slow), 3),
              "code_first_s": round(statistics.median(t_fast), 3), "ratio": round(ratio, 3),
              "target_ratio": TARGET_RATIO, "same_hits": agree}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{len(sigs)} error-number signatures on a {args.mb} MB log: context-first "
              f"{result['context_first_s']} s, code-first {result['code_first_s']} s, ratio {ratio:.2f} "
              f"(target <= {TARGET_RATIO}); same hits: {agree}")
    return 0 if agree and ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
