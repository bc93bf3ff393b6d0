"""Print triage accuracy on real logs, in-sample and held-out separately: ``python tests/triage_accuracy.py``.

``fixtures/triage_corpus`` holds the in-sample logs (signatures may be written against them). It includes the 19
logs of the first held-out round: once their misses had been read they could no longer serve as held-out, so they
were moved in-sample.

``fixtures/triage_heldout`` is a fresh held-out set of 24 real logs from public threads that are in neither folder
(ExecuTorch QNN, ONNX Runtime QNN EP and apps built on it, QNN SDK tools, MNN, llama.cpp's Hexagon backend, mllm,
PowerServe). They were collected and labelled from what each thread established, and committed, before any
signature or engine change of that round; triage was run on them once, after the changes, and the figure was not
tuned on. Each ``manifest.json`` gives the expected category and the source URL of every log.

Measured once, after that round's changes: in-sample 94/95 = 98.9% (88/95 before them), fresh held-out
16/24 = 66.7% (15/24 = 62.5% before them) — far from the 90% goal; the misses are wordings no family covers yet
(an op validator's own message without 3110, MSVC header errors, "not supported with this build" prose, FastRPC
URI/symbol errors, "different with pytorch" prose, a repeated-token description) and one label only the thread
can give (an SDK mismatch whose log shows a tensor-name collision). Do not tune on them: collect a new held-out
set for the next round.

Held-out misses are listed only with ``--show-heldout``; ``--in-sample-only`` skips the held-out part entirely (use
it while editing signatures so that the held-out figure cannot leak into them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = FIXTURES / "triage_corpus"
HELDOUT = FIXTURES / "triage_heldout"
GOAL_IN_SAMPLE = 0.85
GOAL_HELDOUT = 0.90


class CaseResult(BaseModel):
    id: str
    expected: str
    got: str
    confidence: float
    evidence: int
    next_steps: int
    seconds: float


def evaluate(corpus: Path = CORPUS) -> list[CaseResult]:
    from qnn_debug.triage import triage_log

    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    out = []
    for case in manifest["cases"]:
        r = triage_log(corpus / case["file"])
        out.append(CaseResult(id=case["id"], expected=case["expected"], got=r.category, confidence=r.confidence,
                              evidence=len(r.evidence), next_steps=len(r.next_steps), seconds=r.stats.seconds))
    return out


def top1(results: list[CaseResult]) -> float:
    return sum(r.got == r.expected for r in results) / len(results)


def _print_cases(results: list[CaseResult], misses_only: bool) -> None:
    for r in results:
        if misses_only and r.got == r.expected:
            continue
        mark = "ok " if r.got == r.expected else "MISS"
        print(f"{mark} {r.id:<40} expected {r.expected:<34} got {r.got:<34} conf {r.confidence:.2f}")


def main(argv: list[str]) -> int:
    in_sample = evaluate(CORPUS)
    _print_cases(in_sample, misses_only="--all" not in argv)
    hits_in = sum(r.got == r.expected for r in in_sample)
    print(f"in-sample top-1: {hits_in}/{len(in_sample)} = {top1(in_sample):.1%}")
    if "--in-sample-only" in argv:
        return 0 if top1(in_sample) >= GOAL_IN_SAMPLE else 1
    held = evaluate(HELDOUT)
    if "--show-heldout" in argv:
        print("held-out cases:")
        _print_cases(held, misses_only=False)
    hits_held = sum(r.got == r.expected for r in held)
    print(f"held-out  top-1: {hits_held}/{len(held)} = {top1(held):.1%}  (goal {GOAL_HELDOUT:.0%})")
    return 0 if top1(in_sample) >= GOAL_IN_SAMPLE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
