"""Block localisation at real LLM size: wall time against the simulator's own time, peak RSS against the weights.

Model: a Qwen3-shaped decoder at 0.6B width (hidden 1024, 16/8 heads of 128, FFN 3072, vocab 151936,
28 layers) or, with ``--width 1.7b``, 1.7B width (hidden 2048, FFN 6144, 16/8 heads of 128; 8 layers by
default), prefill 128, fp32 weights in external data, built once by :mod:`qnn_debug.llm.sized` into a
cache folder (``bench/.cache``, gitignored). Two faulty copies share the clean copy's data file:

- ``rotary``: rotate_half without its Neg in layer L-2 (a real bug): expected first failing block
  ``layer L-2`` and op ``/layers.{L-2}/self_attn/rotary_q/Concat``;
- ``spike``: two residual channels at 400 on token 0 in layer 1 (fp16 range, not a bug): expected
  ``fp16_range`` at ``/layers.2/input_layernorm/Pow``.

Each case runs ``qnn_debug.localise.blocks.run_blocks`` (what ``qnn-debug localise-blocks --inner none``
runs) in a fresh child process; the peak RSS of that process (the tool's main process) and of every
process below it (the simulator worker) is read from ``/proc/PID/status`` (VmHWM) while they run. Printed per case: wall time, the
simulator's own time (sessions + runs of the block stages and the op stage, measured in the worker), the
tool's overhead (wall - simulator) and its ratio to the simulator time (target <= 0.5), peak RSS per
process and its ratio to the weight bytes (target <= 4 GiB at 1.7B width), and whether block and op are right.

Not measured here (left undone): ``diagnose`` with chunked marking and ``bisect`` at this size — they still
load whole models, and running them at full size would need more memory than this benchmark allows.

Run: ``python bench/llm_scale.py [--width 0.6b|1.7b] [--layers N] [--faults rotary,spike] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
WIDTHS: dict[str, dict[str, Any]] = {
    "0.6b": {"hidden": 1024, "heads": 16, "kv_heads": 8, "head_dim": 128, "intermediate": 3072, "vocab": 151936,
             "layers": 28},
    "1.7b": {"hidden": 2048, "heads": 16, "kv_heads": 8, "head_dim": 128, "intermediate": 6144, "vocab": 151936,
             "layers": 8},
}
OVERHEAD_TARGET = 0.5
RSS_TARGET = 4 * GIB


def build(cache: Path, width: str, layers: int, seq: int) -> dict[str, Any]:
    from qnn_debug.llm.sized import Qwen3Sizes, SizedDecoder, build_sized_decoder
    from qnn_debug.llm.tiny_graph import GraphFaults

    folder = cache / f"qwen3-{width}-L{layers}-s{seq}"
    done = folder / "decoder.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    if folder.exists():  # an interrupted build
        import shutil

        shutil.rmtree(folder)
    sizes = Qwen3Sizes(**{**WIDTHS[width], "layers": layers, "rope_theta": 1000000.0})
    t0 = time.perf_counter()
    d: SizedDecoder = build_sized_decoder(folder, sizes, seq=seq, faults={
        "rotary": GraphFaults(wrong_rotary_layer=layers - 2), "spike": GraphFaults(residual_spike_layer=1)})
    doc = {**json.loads(d.model_dump_json()), "build_s": round(time.perf_counter() - t0, 1),
           "build_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    done.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return doc


def child(args: argparse.Namespace) -> None:
    """One localise-blocks run in this process; prints its result, timings and the peak RSS figures."""
    from qnn_debug.localise.blocks import BlockRequest, run_blocks

    t0 = time.perf_counter()
    r = run_blocks(BlockRequest(model=Path(args.model), reference_model=Path(args.reference), inputs=Path(args.inputs),
                                out=Path(args.out), force=True, max_memory=args.max_memory))
    wall = time.perf_counter() - t0
    bad = r.first_failing_block
    print(json.dumps({"wall_s": wall, "timings": r.timings, "verdict": r.verdict,
                      "block": None if bad is None else bad.first, "op": r.first_failing.op if r.first_failing else None,
                      "range_op": r.fp16_range.op if r.fp16_range else None}))


def _status(pid: int) -> tuple[int, int] | None:
    """(parent pid, peak RSS bytes) of a live process, from /proc (VmHWM: this process's own peak since exec)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["PPid"]), int(fields["VmHWM"].split()[0]) * 1024
    except (KeyError, ValueError):
        return None


def watch_peaks(proc: subprocess.Popen[str]) -> dict[int, tuple[int, str]]:
    """Poll the peak RSS of ``proc`` and every process below it until it exits (getrusage cannot tell them apart:
    a worker's ru_maxrss keeps its parent's peak from before exec)."""
    import threading

    peaks: dict[int, tuple[int, str]] = {}

    def poll() -> None:
        while proc.poll() is None:
            family = {proc.pid}
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and (st := _status(int(entry.name))) is not None and st[0] in family:
                    family.add(int(entry.name))
            for pid in family:
                st = _status(pid)
                if st is not None and st[1] > peaks.get(pid, (0, ""))[0]:
                    peaks[pid] = (st[1], "")
            time.sleep(0.5)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    proc.wait()
    thread.join()
    return peaks


def run_case(decoder: dict[str, Any], fault: str, out: Path, max_memory: int | None) -> dict[str, Any]:
    layers = decoder["sizes"]["layers"]
    model = decoder["faulty"][fault]
    reference = decoder["clean"] if fault == "rotary" else model  # the spike is in the export itself
    cmd = [sys.executable, __file__, "--child", "--model", model, "--reference", reference, "--inputs",
           decoder["inputs"], "--out", str(out / fault)]
    if max_memory:
        cmd += ["--max-memory", str(max_memory)]
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    log_out, log_err = out / f"{fault}.stdout", out / f"{fault}.stderr"
    with log_out.open("w") as fo, log_err.open("w") as fe, subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
        peaks = watch_peaks(proc)
    stdout, stderr = log_out.read_text(), log_err.read_text()
    total = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{fault}: the run failed:\n{stderr[-3000:]}")
    doc = json.loads(stdout.strip().splitlines()[-1])
    doc["main_rss"] = peaks.get(proc.pid, (0, ""))[0]
    doc["worker_rss"] = max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0)
    t = doc["timings"]
    sim = float(t.get("htp_sim_blocks_s", 0.0)) + float(t.get("htp_sim_ops_s", 0.0))
    overhead = doc["wall_s"] - sim
    if fault == "rotary":
        right = doc["block"] == layers - 2 and doc["op"] == f"/layers.{layers - 2}/self_attn/rotary_q/Concat"
    else:
        right = doc["range_op"] == "/layers.2/input_layernorm/Pow"
    weights = decoder["weight_bytes"]
    return {"fault": fault, "right": right, "verdict": doc["verdict"], "block": doc["block"], "op": doc["op"],
            "fp16_range_op": doc["range_op"], "wall_s": round(doc["wall_s"], 1), "process_s": round(total, 1),
            "simulator_s": round(sim, 1), "overhead_s": round(overhead, 1),
            "overhead_ratio": round(overhead / sim, 3) if sim else None,
            "main_rss_gib": round(doc["main_rss"] / GIB, 2), "worker_rss_gib": round(doc["worker_rss"] / GIB, 2),
            "main_rss_per_weight": round(doc["main_rss"] / weights, 3),
            "worker_rss_per_weight": round(doc["worker_rss"] / weights, 3),
            "meets": bool(right and sim and overhead <= OVERHEAD_TARGET * sim
                          and max(doc["main_rss"], doc["worker_rss"]) <= RSS_TARGET),
            "timings": t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", choices=sorted(WIDTHS), default="0.6b")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--faults", default="rotary,spike")
    ap.add_argument("--cache", type=Path, default=HERE / ".cache")
    ap.add_argument("--max-memory", type=int, default=3 * GIB, help="per-process budget in bytes (default 3 GiB)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("model", "reference", "inputs", "out"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    layers = args.layers or WIDTHS[args.width]["layers"]
    args.cache.mkdir(parents=True, exist_ok=True)
    decoder = build(args.cache, args.width, layers, args.seq)
    out = args.cache / "runs" / f"{args.width}-L{layers}"
    cases = [run_case(decoder, f, out, args.max_memory) for f in args.faults.split(",") if f]
    report = {"width": args.width, "layers": layers, "seq": args.seq, "weight_gib": round(decoder["weight_bytes"] / GIB, 2),
              "build_s": decoder.get("build_s"), "cases": cases, "meets_targets": all(c["meets"] for c in cases)}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{args.width} width, {layers} layers, prefill {args.seq}: {report['weight_gib']} GiB of fp32 weights "
          f"(built in {report['build_s']} s, cached)")
    for c in cases:
        print(f"  {c['fault']:<7} {'right' if c['right'] else 'WRONG'} block {c['block']} op {c['op']} "
              f"range {c['fp16_range_op']}")
        print(f"          wall {c['wall_s']} s, simulator {c['simulator_s']} s, overhead {c['overhead_s']} s "
              f"= {c['overhead_ratio']}x the simulator (target <= {OVERHEAD_TARGET})")
        print(f"          peak RSS main {c['main_rss_gib']} GiB ({c['main_rss_per_weight']}x weights), "
              f"simulator worker {c['worker_rss_gib']} GiB ({c['worker_rss_per_weight']}x weights)")
    print(f"targets {'met' if report['meets_targets'] else 'NOT met'}")


if __name__ == "__main__":
    main()
