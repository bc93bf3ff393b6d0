"""Print triage accuracy on real logs, in-sample and held-out separately: ``python tests/triage_accuracy.py``.

``fixtures/triage_corpus`` holds the in-sample logs (signatures may be written against them). It includes the logs of
the two earlier held-out rounds: once their misses had been read they could no longer serve as held-out, so they were
moved in-sample (the second round's 24 logs carry ``"round": "heldout-2"`` and are reported as their own line).

``fixtures/triage_heldout`` is the third held-out set: 29 real logs from public threads used in neither folder nor an
earlier round (MNN QNN, ONNX Runtime QNN EP and apps on it, ORT GenAI, QAIRT/AI Hub/Genie, ExecuTorch QNN, llama.cpp's
Hexagon and QNN backends, mllm, AIMET, Local Dream). They were collected, labelled and committed before any signature
or engine change of that round; triage is run on them once, after the changes, and the figure is not tuned on. Each
``manifest.json`` gives the expected category, the source URL of every log and, for borderline labels, why.

History: round 1 held-out 15/19 -> in-sample; round 2 held-out 16/24 = 66.7% (measured once) -> in-sample.

Round 3, measured once after that round's changes: in-sample 117/119 = 98.3% (110/119 before them; the round-2 logs
alone 23/24 after, 16/24 before), round-3 held-out 10/29 = 34.5% (9/29 = 31.0% with the signatures before the
round). Far below the 90% goal, and the honest out-of-sample figure: the families written from the round-2 misses
generalise to in-sample logs but barely to new runtimes' wording. The 19 misses, by reason (not tuned on):
  no family for the wording at all (15): QNN error enum names printed by a runtime (chraacllama-46
    QNN_GRAPH_ERROR_INVALID_HANDLE), ORT GenAI / EPContext load failures (ortgenai-1637, ortex-497), a context
    binary of another SDK (et-9311 "Unknown QNN BinaryInfo version"), ORT's layout-transformer refusal "was not
    selected by that EP" (ort-21848), a backend's own capability check (chraacllama-20 "support/unsupported"), a
    graph builder's "Failed to add node" / "Int16 is not supported by QNN" (mllm-662), "Failed to register op
    package" (mllm-274), FastRPC error names (llamacpp-18932 AEE_EUNABLETOLOAD; ort-25696 remote_mmap64 failures
    are memory maps, the session family deliberately leaves mmap out), a missing Python extension
    (et-5751 ModuleNotFoundError), compile failures told in prose (mllm-284; mnn-4449 in Chinese, its log a
    screenshot), an app's generic inference error (aion-6 ps_result=-968), "total noise image" (et-7550);
  a crash outside an export context (1): ort-28717, the QNN EP segfaults at session creation and the segfault
    signature needs MNN/QNN tool context (its anchor is also case-sensitive: "Segmentation Fault");
  the label comes from the thread, not from the log (3): aihubmodels-289 (5005, fixed by a smaller VTCM),
    localdream-165 ("exec failed", fixed by freeing RAM), aihubapps-26 ("Unable to find a valid interface", caused
    by the phone's own QNN libraries of another version).
A next round needs a new held-out set: these 29 have been read.

Held-out cases are listed only with ``--show-heldout``; ``--in-sample-only`` skips the held-out part entirely (use it
while editing signatures so that the held-out figure cannot leak into them).
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
    round: str = ""
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
        out.append(CaseResult(id=case["id"], round=case.get("round", ""), expected=case["expected"], got=r.category, confidence=r.confidence,
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


def _line(label: str, results: list[CaseResult]) -> str:
    hits = sum(r.got == r.expected for r in results)
    return f"{label}: {hits}/{len(results)} = {top1(results):.1%}" if results else f"{label}: none"


def main(argv: list[str]) -> int:
    in_sample = evaluate(CORPUS)
    _print_cases(in_sample, misses_only="--all" not in argv)
    print(_line("in-sample top-1", in_sample))
    for rnd in ("heldout-2", "heldout-3"):
        print("  " + _line(f"of which round-{rnd[-1]} held-out (moved in-sample after its one measurement)",
                           [r for r in in_sample if r.round == rnd]))
    if "--in-sample-only" in argv:
        return 0 if top1(in_sample) >= GOAL_IN_SAMPLE else 1
    held = evaluate(HELDOUT)
    if "--show-heldout" in argv:
        print("held-out cases:")
        _print_cases(held, misses_only=False)
    print(_line("held-out  top-1 (round 3, never tuned on)", held) + f"  (goal {GOAL_HELDOUT:.0%})")
    return 0 if top1(in_sample) >= GOAL_IN_SAMPLE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
