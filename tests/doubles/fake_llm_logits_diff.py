"""TEST DOUBLE for MNN's ``llm_logits_diff`` on a phone — not the real tool; the fake phone runs it via ``fake_adb``.

``llm_logits_diff configA configB prompt.txt [max_tokens]``: both configs are loaded with the host's MNN wheel LLM
runtime, A's argmax drives both (teacher forcing), and each step is printed in the real tool's row format,
followed by its ``summary:`` and ``distribution:`` lines.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(f"Usage: {sys.argv[0]} configA.json configB.json prompt.txt [max_tokens]")
        return 0
    import MNN.llm as mnn_llm

    max_tokens = int(argv[3]) if len(argv) > 3 else 256
    a, b = mnn_llm.create(argv[0]), mnn_llm.create(argv[1])
    a.load()
    b.load()
    prompt = Path(argv[2]).read_text(encoding="utf-8").rstrip("\r\n")
    ids = a.tokenizer_encode(a.apply_chat_template(prompt))
    print(f"prompt tokens: {len(ids)}, max new tokens: {max_tokens}")
    la = np.array(a.forward(ids).read(), np.float64).reshape(-1)
    lb = np.array(b.forward(ids).read(), np.float64).reshape(-1)
    print("step | tokA(argmaxA) tokB(argmaxB) agree | marginA marginB | maxAbsDiff meanAbsDiff | text")
    disagree, first, worst, kl_sum = 0, -1, 0.0, 0.0
    for t in range(max_tokens):
        ta, tb = int(la.argmax()), int(lb.argmax())
        ma = float(la[ta] - np.partition(la, -2)[-2])
        mb = float(lb[tb] - np.partition(lb, -2)[-2])
        d = np.abs(la - lb)
        worst = max(worst, float(d.max()))
        pa, pb = np.exp(la - la.max()), np.exp(lb - lb.max())
        pa, pb = pa / pa.sum(), pb / pb.sum()
        kl_sum += float(np.sum(pa * np.log(np.maximum(pa, 1e-12) / np.maximum(pb, 1e-12))))
        if ta != tb:
            disagree += 1
            first = t if first < 0 else first
        try:
            text = a.tokenizer_decode(ta).replace("\n", " ")
        except UnicodeDecodeError:
            text = ""
        print(f"{t:4d} | {ta:6d} {tb:6d} {'  ==' if ta == tb else 'DIFF'} | {ma:7.4f} {mb:7.4f} | {d.max():9.5f} "
              f"{d.mean():11.7f} | {text}")
        la = np.array(a.forward([ta]).read(), np.float64).reshape(-1)
        lb = np.array(b.forward([ta]).read(), np.float64).reshape(-1)
    print(f"\nsummary: argmax disagreements={disagree}, first at step {first}, worst maxAbsDiff={worst:.5f}")
    print(f"distribution: mean KL(A||B)={kl_sum / max_tokens:.6f}, teacher-forced mean NLL A={math.nan} B={math.nan} (log-ppl)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
