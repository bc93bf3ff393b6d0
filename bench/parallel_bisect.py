"""``bisect`` of a model run piece by piece, its probes through the parallel engine: wall time, rounds and probes
against the serial binary search, side by side from one run, with the peak RSS of every process.

Model: the Qwen3-shaped decoder of ``bench/llm_scale.py`` (0.6B width by default, ``--layers`` deep, prefill
``--seq``), built once into ``bench/.cache``, with a rotary fault in layer L-2 (near the end: the search walks
to the right). ``--max-memory`` (default ``llm_scale.BUDGETS``) is below one session of the whole model, so the
chain path runs. Each case is ``bisect`` in a fresh child process (the engine's start-up inside its wall time):

- ``serial``: ``--workers 1``: the chain and then one probe after another in one simulator child (main's path);
- ``cores``: ``--workers N`` (default: every core): the chain as one job, then rounds of N probes at once on an
  embedded Ray cluster; the pieces are planned within the budget's share of one worker;
- ``two-nodes``: ``--cluster``: the same on a Ray head and a second node over loopback (``parallel_blocks``'s).

Both must name the same op with the same probes; the rounds (the chain pass counts as one) and the probes run
(the rounds' off-path probes included) say what the parallel search paid for its time.

Run: ``python bench/parallel_bisect.py [--width 0.6b|1.7b] [--layers 8] [--seq 32] [--cases serial,cores] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llm_scale import BUDGETS, GIB, WIDTHS, build, watch_peaks  # noqa: E402
from parallel_blocks import start_cluster, stop_cluster  # noqa: E402


def child(args: argparse.Namespace) -> None:
    from qnn_debug.localise.bisect import BisectRequest, run_bisect

    t0 = time.perf_counter()
    r = run_bisect(BisectRequest(model=Path(args.model), reference_model=Path(args.reference), inputs=Path(args.inputs),
                                 out=Path(args.out), force=True, max_memory=args.max_memory, workers=args.workers,
                                 cluster=args.cluster))
    print(json.dumps({"wall_s": time.perf_counter() - t0, "timings": r.timings, "verdict": r.verdict,
                      "op": r.first_failing.op if r.first_failing else None,
                      "probes": [p.index for p in r.probes], "ray_imported": "ray" in sys.modules}))


def run_case(name: str, decoder: dict[str, Any], out: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--model", decoder["faulty"]["rotary"], "--reference",
           decoder["clean"], "--inputs", decoder["inputs"], "--out", str(out / name), *extra]
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{name}.stdout").open("w") as fo, (out / f"{name}.stderr").open("w") as fe, \
            subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
        peaks = watch_peaks(proc)
    if proc.returncode:
        return {"case": name, "error": (out / f"{name}.stderr").read_text()[-2000:]}
    doc = json.loads((out / f"{name}.stdout").read_text().strip().splitlines()[-1])
    layers = decoder["sizes"]["layers"]
    t = doc["timings"]
    return {"case": name, "right": doc["op"] == f"/layers.{layers - 2}/self_attn/rotary_q/Concat",
            "op": doc["op"], "probes": doc["probes"], "wall_s": round(doc["wall_s"], 1),
            "baseline_s": t.get("baseline_s"), "simulator_s": t.get("htp_sim_s"), "pieces": int(t.get("pieces", 0)),
            "rounds": int(t.get("rounds", 0)), "probes_run": int(t.get("probes_run", len(doc["probes"]))),
            "workers": int(t.get("workers", 1)), "engine_start_s": t.get("engine_start_s"),
            "peak_rss_gib_per_process": round(max((v for v, _ in peaks.values()), default=0) / GIB, 2),
            "main_rss_gib": round(peaks.get(proc.pid, (0, ""))[0] / GIB, 2),
            "worker_rss_gib": round(max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0) / GIB, 2),
            "ray_imported": doc["ray_imported"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", choices=sorted(WIDTHS), default="0.6b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--cases", default="serial,cores")
    ap.add_argument("--workers", type=int, default=None, help="for the cores case (default: every core)")
    ap.add_argument("--max-memory", type=int, default=None)
    ap.add_argument("--cache", type=Path, default=HERE / ".cache")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cluster", help=argparse.SUPPRESS)
    for name in ("model", "reference", "inputs", "out"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    from qnn_debug.parallel import machine_cores

    decoder = build(args.cache, args.width, args.layers, args.seq)
    out = Path(tempfile.mkdtemp(prefix="qnn-debug-bisect-bench-"))
    cores = args.workers or machine_cores()
    mem = ["--max-memory", str(args.max_memory or BUDGETS[args.width])]
    rows: list[dict[str, Any]] = []
    for case in args.cases.split(","):  # in the order given: on a shared machine, run it both ways round
        if case == "serial":
            rows.append(run_case("serial", decoder, out, ["--workers", "1", *mem]))
        elif case == "cores":
            rows.append(run_case("cores", decoder, out, ["--workers", str(cores), *mem]))
        elif case == "two-nodes":
            address, procs = start_cluster(out)
            try:
                rows.append(run_case("two-nodes", decoder, out, ["--cluster", address, *mem]))
            finally:
                stop_cluster(procs)
    serial = next((r for r in rows if r["case"] == "serial" and "wall_s" in r), None)
    for r in rows:
        if serial and "wall_s" in r:
            r["ratio_to_serial"] = round(r["wall_s"] / serial["wall_s"], 3)
            r["same_probes_as_serial"] = r["probes"] == serial["probes"] and r["op"] == serial["op"]
    summary = {"width": args.width, "layers": args.layers, "seq": args.seq, "max_memory": int(mem[1]),
               "machine_cores": machine_cores(), "load_avg_1min": os.getloadavg()[0], "rows": rows}
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"logs and outputs in {out}")
    print(f"{args.width} width x {args.layers} layers, prefill {args.seq}, --max-memory {int(mem[1]) / GIB:.1f} GiB; "
          f"{machine_cores()} cores; load {summary['load_avg_1min']:.1f} (a shared machine: read the ratios)")
    for r in rows:
        if "error" in r:
            print(f"  {r['case']:<10} FAILED: {r['error'][-400:]}")
            continue
        print(f"  {r['case']:<10} wall {r['wall_s']:>7.1f} s  x{r.get('ratio_to_serial', 1.0):.2f} serial  "
              f"(baseline {r['baseline_s']} s, simulator {r['simulator_s']} s)  pieces {r['pieces']}  rounds "
              f"{r['rounds']}  probes {len(r['probes'])} walked / {r['probes_run']} run  workers {r['workers']}  "
              f"engine start {r['engine_start_s'] or 0:.1f} s  peak main {r['main_rss_gib']:.2f} / other processes "
              f"{r['worker_rss_gib']:.2f} GiB  right {r['right']}  same as serial {r.get('same_probes_as_serial')}")


if __name__ == "__main__":
    main()
