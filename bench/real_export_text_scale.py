"""`llm-check` and `llm-text` on MNN's real llmexport `--export mnn` folder at Qwen3-0.6B width.

Model: a random-weight Qwen3 built by transformers from the 0.6B config (hidden 1024, FFN 3072, 16/8 heads,
head_dim 128, vocab 151936; ``--layers``, default 28), exported by llmexport 0.0.5 in the exporter venv of the
test tier (``make setup-llmexport``) to ``llm.mnn`` + 4-bit block-64 ``llm.mnn.weight``. One fault, layer
``--layer``'s rotary Neg removed in ``llm.mnn`` (the tier's ``mnn_rotary_without_neg``), against a JSON round
trip of the same folder as control. Printed side by side in one run: each command's wall time and peak RSS
(the CLI process and its children), and ``llm-text``'s time against a plain MNN.llm generation of the same
tokens, as a ratio (the machine is noisy; read ratios, not seconds).

Run: ``python bench/real_export_text_scale.py [--layers 28] [--layer 26] [--json]`` (build ~1.5 min, export ~1 min,
each tool well under a minute; cached in ``bench/.cache/real-text-0.6b-L<layers>``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import real_export_scale as scale  # noqa: E402  (the same model build as the localise/diagnose bench)

GIB = 1 << 30
PROMPT = "Hello, tell me about the weather in Hangzhou today."


def export_mnn(cache: Path, layers: int) -> Path:
    """The 0.6B-width Hugging Face model and its ``--export mnn`` folder (cached)."""
    tier = scale._tier()
    root = cache / f"real-text-0.6b-L{layers}"
    folder = root / "Qwen3-0.6B-MNN"
    if (folder / "llm.mnn.weight").is_file():
        return folder
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    py = str(tier._python())
    env = {**tier._base_env(), "PATH": f"{tier._shim_dir(cache)}:{tier.EXPORT_VENV / 'bin'}:{os.environ.get('PATH', '')}"}
    spec = {**scale.WIDTH, "num_hidden_layers": layers}
    t0 = time.perf_counter()
    tier._run([py, "-c", scale._BUILD, str(REPO / "tests"), json.dumps(spec), str(root / "hf")], root / "build.log",
              root, env, "building the 0.6B-width model")
    print(f"build: {time.perf_counter() - t0:.1f} s", flush=True)
    exporter, _ = tier._exporter()
    t0 = time.perf_counter()
    tier._run([py, str(Path(exporter) / "llmexport.py"), "--path", str(root / "hf"), "--dst_path", str(folder),
               "--export", "mnn"], root / "export.log", root, {**env, "PYTHONPATH": exporter}, "llmexport --export mnn")
    print(f"export mnn: {time.perf_counter() - t0:.1f} s, "
          f"{sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / GIB:.2f} GiB", flush=True)
    shutil.rmtree(root / "hf")
    return folder


def timed(args: list[str]) -> tuple[float, float, dict[str, Any]]:
    """(wall s, peak RSS GiB of the command and its children, its --json answer)."""
    cmd = [sys.executable, "-c", "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
           "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)",
           sys.executable, "-m", "qnn_debug", *args, "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    peak = next((int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("PEAK ")), 0) * 1024 / GIB
    out = p.stdout.strip().splitlines()
    if p.returncode not in (0, 1) or not out:
        raise SystemExit(f"{args[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    return wall, peak, json.loads(out[-1])


_PLAIN = """
import json, os, sys, time
import numpy as np
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # MNN prints to fd 1
import MNN.llm as mnn_llm
t0 = time.perf_counter()
llm = mnn_llm.create(sys.argv[1])
llm.set_config(json.dumps({"sampler_type": "greedy", "thread_num": 1, "async": False}))
llm.load()
x = list(llm.tokenizer_encode(llm.apply_chat_template(sys.argv[3])))
for _ in range(int(sys.argv[2])):
    var = llm.forward(x)
    row = np.array(var.read(), dtype=np.float32, copy=True).reshape(-1)
    del var
    x = [int(row.argmax())]
print("WALL", time.perf_counter() - t0, file=sys.stderr)
"""


def plain_generation(folder: Path, tokens: int, prompt: str) -> float:
    """MNN.llm on its own, greedy, as llm-text's worker runs it: the cost llm-text adds to."""
    p = subprocess.run([sys.executable, "-c", _PLAIN, str(folder / "config.json"), str(tokens), prompt],
                       capture_output=True, text=True, timeout=1800)
    line = next((x for x in p.stderr.splitlines() if x.startswith("WALL ")), None)
    if line is None:
        raise SystemExit(f"plain MNN.llm run failed: {p.stderr[-2000:]}")
    return float(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--layer", type=int, default=26)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--cache", type=Path, default=HERE / ".cache")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "testkit"))
    from qnn_debug_testkit import real_faults as F

    clean = export_mnn(args.cache, args.layers)
    work = args.cache / f"real-text-0.6b-L{args.layers}" / "runs"
    shutil.rmtree(work, ignore_errors=True)
    control = Path(F.mnn_roundtrip(clean, work / "Qwen3-0.6B-roundtrip").folder)
    bug = Path(F.mnn_rotary_without_neg(clean, work / "Qwen3-0.6B-rotary", args.layer).folder)
    rows: dict[str, Any] = {}
    wall, peak, doc = timed(["llm-check", str(clean)])
    rows["llm-check"] = {"wall_s": round(wall, 1), "peak_gib": round(peak, 2),
                         "errors": [f["id"] for f in doc["findings"] if f["severity"] == "error"]}
    for name, target in (("llm-text control", control), ("llm-text rotary", bug)):
        wall, peak, doc = timed(["llm-text", str(clean), "--target-export", str(target), "--out", str(work / name[9:]),
                                 "--max-new-tokens", str(args.tokens), "--prompt", PROMPT])
        rows[name] = {"wall_s": round(wall, 1), "peak_gib": round(peak, 2), "verdict": doc.get("verdict"),
                      "logits_sqnr_min_db": (doc.get("comparison") or {}).get("logits_sqnr_min_db")}
    plain = plain_generation(clean, args.tokens, PROMPT)
    rows["plain MNN.llm generation"] = {"wall_s": round(plain, 1)}
    rows["ratio llm-text / plain (control)"] = round(rows["llm-text control"]["wall_s"] / plain, 2)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for k, v in rows.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
