"""``llm-text`` and ``llm-check`` at real LLM size, each against a plain measurement of the same export in the same run.

Export: a Qwen3-shaped decoder at 0.6B size (hidden 1024, 16/8 heads of 128, FFN 3072, vocab 151936,
28 layers; ``--width 1.7b`` for hidden 2048 / FFN 6144, also 28 layers as the real model) written by :mod:`qnn_debug_testkit.sized_export` as
llmexport writes it: ``llm.mnn`` + 4-bit block-quantised ``llm.mnn.weight`` (block 64, asymmetric),
``embeddings_bf16.bin``, configs and tokenizer; built once into ``bench/.cache`` (gitignored). The build
records the builder's own peak RSS and the converter process's peak RSS against the fp32 weight bytes.

Measured, each in a fresh child process whose peak RSS (VmHWM) and that of every process below it is read
from ``/proc`` while it runs:

- ``plain``: the same generation ``llm-text`` runs, done directly with ``MNN.llm`` (create, load, greedy
  ``forward`` steps): the floor ``llm-text`` is compared with;
- ``llm-text``: ``qnn-debug llm-text EXPORT --json --max-memory ...`` (CPU reference tokens and logits in its
  worker): wall time against ``plain`` (ratio), main and worker peak RSS against ``llm.mnn.weight``;
  ``plain`` and ``llm-text`` run ``--repeat`` times, interleaved, and the best wall time of each is kept;
- ``llm-text --target-export``: the same against a second export with one fault (rotate_half without its Neg
  in layer L-2): verdict, first divergence, per-step logits SQNR, time and peak RSS (three runtime runs);
- ``llm-check``: ``qnn-debug llm-check EXPORT --json``: wall time and peak RSS against the export's bytes.

Run: ``python bench/llm_text_scale.py [--width 0.6b|1.7b] [--layers N] [--tokens 16] [--json]``.
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
sys.path.insert(0, str(HERE))
from llm_scale import WIDTHS, watch_peaks  # noqa: E402  (the same sizes and the same /proc peak reader)

GIB = 1 << 30
MIB = 1 << 20
PROMPT = "Hello, tell me about the weather in Hangzhou today."


def build(cache: Path, width: str, layers: int, fault: str | None = None) -> dict[str, Any]:
    """The export folder, built once; its ``export.json`` records the sizes and what the build cost."""
    folder = cache / f"qwen3-{width}-L{layers}-mnn-q4b64{'-' + fault if fault else ''}"
    done = folder / "export.json"
    if done.is_file():
        return dict(json.loads(done.read_text(encoding="utf-8")))
    if folder.exists():  # an interrupted build
        shutil.rmtree(folder)
    cmd = [sys.executable, __file__, "--build-child", "--width", width, "--layers", str(layers), "--out", str(folder)]
    cmd += ["--fault", fault] if fault else []
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        peaks = watch_peaks(proc)
        stdout = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise SystemExit(f"the export build failed (exit {proc.returncode})")
    doc = json.loads(stdout.strip().splitlines()[-1])
    doc["build_s"] = round(time.perf_counter() - t0, 1)
    doc["build_main_rss"] = peaks.get(proc.pid, (0, ""))[0]
    doc["build_worker_rss"] = max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0)
    done.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return doc


def build_child(args: argparse.Namespace) -> None:
    from qnn_debug_testkit.sized import Qwen3Sizes
    from qnn_debug_testkit.sized_export import build_sized_export
    from qnn_debug_testkit.tiny_graph import GraphFaults

    sizes = Qwen3Sizes(**{**WIDTHS[args.width], "layers": args.layers, "rope_theta": 1000000.0})
    faults = GraphFaults(wrong_rotary_layer=args.layers - 2) if args.fault == "rotary" else None
    print(build_sized_export(args.out, sizes, faults=faults).model_dump_json())


def plain_child(args: argparse.Namespace) -> None:
    """A plain greedy generation with MNN.llm (what llm-text's worker does, without the tool around it)."""
    import numpy as np

    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # MNN prints to fd 1; the result goes to fd 3 below
    import MNN.llm as mnn_llm

    t0 = time.perf_counter()
    llm = mnn_llm.create(str(Path(args.export) / "config.json"))
    llm.set_config(json.dumps({"sampler_type": "greedy", "thread_num": 1, "async": False}))
    llm.load()
    t_load = time.perf_counter() - t0
    x = list(llm.tokenizer_encode(llm.apply_chat_template(args.prompt)))
    prompt_len = len(x)
    tokens: list[int] = []
    for _ in range(args.tokens):
        var = llm.forward(x)
        row = np.array(var.read(), dtype=np.float32, copy=True).reshape(-1)
        del var  # an output outliving its Llm crashes the runtime at exit
        tokens.append(int(row.argmax()))
        x = [tokens[-1]]
    wall = time.perf_counter() - t0
    with os.fdopen(args.result_fd, "w") as f:
        f.write(json.dumps({"wall_s": wall, "load_s": t_load, "tokens": tokens, "prompt_tokens": prompt_len,
                            "logits_per_step": int(row.size)}))


def measured(cmd: list[str], log: Path, *, pass_fd: bool = False) -> tuple[float, dict[int, tuple[int, str]], int, str]:
    """Run ``cmd``; wall seconds, peak RSS per process, the top process's pid and its result text."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if pass_fd:
        r, w = os.pipe()
        cmd = [*cmd, "--result-fd", str(w)]
        with log.open("w") as fe, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fe, pass_fds=(w,)) as proc:
            os.close(w)
            peaks = watch_peaks(proc)  # type: ignore[arg-type]
            with os.fdopen(r) as f:
                text = f.read()
    else:
        with log.open("w") as fe, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=fe, text=True) as proc:
            peaks = watch_peaks(proc)
            text = proc.stdout.read() if proc.stdout else ""
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:3]} failed (exit {proc.returncode}); see {log}")
    return wall, peaks, proc.pid, text


def split_peaks(peaks: dict[int, tuple[int, str]], top: int) -> tuple[int, int]:
    return peaks.get(top, (0, ""))[0], max((v for pid, (v, _) in peaks.items() if pid != top), default=0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    cache = Path(args.cache)
    export = build(cache, args.width, args.layers)
    folder = Path(export["dir"])
    work = cache / f"runs-text-{args.width}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    qnn_debug = [sys.executable, "-c", "import sys; from qnn_debug.cli import main; sys.exit(main())"]
    weight = int(export["mnn_weight_bytes"])
    export_bytes = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())

    p_wall = t_wall = float("inf")
    for i in range(args.repeat):  # interleaved, best of each: a shared machine's load hits both alike
        wall, p_peaks, _, p_text = measured(
            [sys.executable, __file__, "--plain-child", "--export", str(folder), "--tokens", str(args.tokens),
             "--prompt", PROMPT], work / f"plain{i}.log", pass_fd=True)
        p_wall = min(p_wall, wall)
        wall, t_peaks, t_pid, t_text = measured(
            [*qnn_debug, "llm-text", str(folder), "--out", str(work / f"llm-text{i}"), "--prompt", PROMPT,
             "--max-new-tokens", str(args.tokens), "--max-memory", args.max_memory, "--json"], work / f"llm-text{i}.log")
        t_wall = min(t_wall, wall)
        text = json.loads(t_text)
        if "error" in text:
            raise SystemExit(f"llm-text failed: {text}")
    plain = json.loads(p_text)
    c_wall, c_peaks, c_pid, c_text = measured([*qnn_debug, "llm-check", str(folder), "--json"], work / "llm-check.log")
    check = json.loads(c_text)
    if "error" in check and isinstance(check["error"], str):
        raise SystemExit(f"llm-check failed: {check}")
    faulty = build(cache, args.width, args.layers, "rotary")
    d_wall, d_peaks, d_pid, d_text = measured(
        [*qnn_debug, "llm-text", str(folder), "--target-export", faulty["dir"], "--out", str(work / "diff"), "--prompt",
         PROMPT, "--max-new-tokens", str(args.tokens), "--max-memory", args.max_memory, "--json"], work / "diff.log")
    diff = json.loads(d_text)
    if "error" in diff:
        raise SystemExit(f"llm-text --target-export failed: {diff}")
    d_main, d_worker = split_peaks(d_peaks, d_pid)
    t_main, t_worker = split_peaks(t_peaks, t_pid)
    c_main = c_peaks.get(c_pid, (0, ""))[0]
    p_rss = max(v for v, _ in p_peaks.values())
    logits = Path(text["reference"]["logits"])
    same = text["reference"]["tokens"] == plain["tokens"][: len(text["reference"]["tokens"])]
    report = {
        "width": args.width, "layers": args.layers, "repeat": args.repeat, "sizes": export["sizes"], "tokens": args.tokens,
        "prompt_tokens": plain["prompt_tokens"],
        "build": {"s": export["build_s"], "onnx_s": export["onnx_s"], "convert_s": export["convert_s"],
                  "fp32_weight_gib": export["fp32_weight_bytes"] / GIB, "mnn_weight_mib": weight / MIB,
                  "embeddings_mib": export["embedding_bytes"] / MIB, "main_rss_gib": export["build_main_rss"] / GIB,
                  "converter_rss_gib": export["convert_peak_rss"] / GIB,
                  "converter_rss_vs_fp32": export["convert_peak_rss"] / export["fp32_weight_bytes"]},
        "plain": {"wall_s": p_wall, "generate_s": plain["wall_s"], "load_s": plain["load_s"], "rss_mib": p_rss / MIB,
                  "logits_per_step": plain["logits_per_step"]},
        "llm_text": {"wall_s": t_wall, "wall_vs_plain": t_wall / p_wall, "main_rss_mib": t_main / MIB,
                     "worker_rss_mib": t_worker / MIB, "worker_rss_vs_weight": t_worker / weight,
                     "worker_rss_vs_plain": t_worker / p_rss, "same_tokens_as_plain": same,
                     "logits_file_mib": logits.stat().st_size / MIB, "verdict": text["verdict"],
                     "max_memory": args.max_memory},
        "llm_text_vs_faulty": {"fault": f"rotate_half without Neg in layer {args.layers - 2}",
                               "wall_s": d_wall, "wall_vs_plain": d_wall / p_wall, "main_rss_mib": d_main / MIB,
                               "worker_rss_mib": d_worker / MIB, "verdict": diff["verdict"],
                               "first_divergence": (diff["comparison"] or {}).get("first_divergence"),
                               "top1_agreement": (diff["comparison"] or {}).get("top1_agreement"),
                               "logits_sqnr_median_db": (diff["comparison"] or {}).get("logits_sqnr_median_db")},
        "llm_check": {"wall_s": c_wall, "main_rss_mib": c_main / MIB, "export_gib": export_bytes / GIB,
                      "rss_vs_export": c_main / export_bytes, "findings": len(check.get("findings", [])),
                      "ops": check.get("ops")},
    }
    return report


def show(r: dict[str, Any]) -> None:
    b, p, t, c, d = r["build"], r["plain"], r["llm_text"], r["llm_check"], r["llm_text_vs_faulty"]
    print(f"export {r['width']} width x {r['layers']} layers: fp32 weights {b['fp32_weight_gib']:.2f} GiB -> "
          f"llm.mnn.weight {b['mnn_weight_mib']:.0f} MiB (4-bit, block 64) + bf16 embeddings {b['embeddings_mib']:.0f} MiB")
    print(f"  build {b['s']:.0f} s (ONNX {b['onnx_s']:.0f} s, converter {b['convert_s']:.0f} s); peak RSS builder "
          f"{b['main_rss_gib']:.2f} GiB, converter {b['converter_rss_gib']:.2f} GiB = {b['converter_rss_vs_fp32']:.2f}x fp32 weights")
    print(f"best of {r['repeat']}: plain MNN.llm greedy, {r['tokens']} tokens after a {r['prompt_tokens']}-token prompt: {p['wall_s']:.1f} s "
          f"(load {p['load_s']:.1f} s), peak {p['rss_mib']:.0f} MiB; logits per step {p['logits_per_step']}")
    print(f"llm-text: {t['wall_s']:.1f} s = {t['wall_vs_plain']:.2f}x plain; peak main {t['main_rss_mib']:.0f} MiB, "
          f"worker {t['worker_rss_mib']:.0f} MiB = {t['worker_rss_vs_weight']:.2f}x llm.mnn.weight, "
          f"{t['worker_rss_vs_plain']:.2f}x plain; logits kept {t['logits_file_mib']:.1f} MiB; same tokens as plain: "
          f"{t['same_tokens_as_plain']}; budget {t['max_memory']}")
    sq = d["logits_sqnr_median_db"]
    step = (d["first_divergence"] or {}).get("step")
    print(f"llm-text --target-export ({d['fault']}; three runtime runs): {d['wall_s']:.1f} s = {d['wall_vs_plain']:.2f}x "
          f"plain; peak main {d['main_rss_mib']:.0f} MiB, worker {d['worker_rss_mib']:.0f} MiB; verdict {d['verdict']}, "
          f"first divergence at step {step}, top-1 agreement {d['top1_agreement']:.0%}, median logits SQNR "
          f"{'n/a' if sq is None else f'{sq:.1f} dB'}")
    print(f"llm-check: {c['wall_s']:.1f} s, peak {c['main_rss_mib']:.0f} MiB for a {c['export_gib']:.2f} GiB export "
          f"({c['rss_vs_export']:.3f}x); {c['ops']} ops, {c['findings']} findings")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", choices=sorted(WIDTHS), default="0.6b")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--max-memory", default="3G")
    ap.add_argument("--repeat", type=int, default=2, help="runs of plain and llm-text each (best wall time kept)")
    ap.add_argument("--cache", default=str(HERE / ".cache"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--build-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plain-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--fault", help=argparse.SUPPRESS)
    ap.add_argument("--export", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", default=PROMPT, help=argparse.SUPPRESS)
    ap.add_argument("--result-fd", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.layers = args.layers or 28  # the real depth of Qwen3-0.6B and -1.7B
    if args.build_child:
        return build_child(args)
    if args.plain_child:
        return plain_child(args)
    if args.build_only:
        print(json.dumps(build(Path(args.cache), args.width, args.layers), indent=1))
        return
    report = run(args)
    print(json.dumps(report, indent=1) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        show(report)


if __name__ == "__main__":
    main()
