"""Print triage accuracy on the real-log corpus: ``python tests/triage_accuracy.py``.

The corpus (``fixtures/triage_corpus``) holds trimmed logs from public MNN and ONNX Runtime QNN issues
plus logs written by MNN's QNN backend on the HTP simulator; ``manifest.json`` gives each expected
category and source URL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

CORPUS = Path(__file__).resolve().parent / "fixtures" / "triage_corpus"


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


def main() -> int:
    results = evaluate()
    hits = sum(r.got == r.expected for r in results)
    for r in results:
        mark = "ok " if r.got == r.expected else "MISS"
        print(f"{mark} {r.id:<40} expected {r.expected:<34} got {r.got:<34} conf {r.confidence:.2f}")
    print(f"top-1 accuracy: {hits}/{len(results)} = {hits / len(results):.1%}")
    return 0 if hits / len(results) >= 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
