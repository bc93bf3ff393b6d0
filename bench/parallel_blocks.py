"""Block runs through the parallel engine: wall time against the serial run, on this machine's cores and on a
two-node cluster over loopback, and the engine's start-up overhead. Ratios side by side, from one run.

``--tool diagnose`` runs ``diagnose`` (faulted decoder against the clean one, ``--max-memory`` the width's budget
so the model runs unit by unit) instead of ``localise-blocks --inner none``: its jobs are the unit sessions (the
unmarked chain and each unit's marked session).

Model: the Qwen3-shaped decoder of ``bench/llm_scale.py`` (0.6B width by default: hidden 1024, 16/8 heads of
128, FFN 3072, vocab 151936; ``--layers`` deep, prefill ``--seq``), built once into ``bench/.cache``, with a
rotary fault in layer L-2. Each case is ``localise-blocks --inner none`` in a fresh child process (so the
engine's start-up is inside its wall time), peak RSS read per process from /proc (VmHWM):

- ``serial``: ``--workers 1`` (the jobs one after another in one simulator child);
- ``cores``: ``--workers N`` (default: every core), an embedded Ray cluster in the child (goal: <= 0.6x serial);
- ``two-nodes``: ``--cluster``: a Ray head and a second node (one CPU each, as two machines would be), both on
  this machine's loopback (127.0.0.2, 127.0.0.3), started here and stopped after; the ratio to serial is stated
  against the worker cores (ideal 1/2);
- start-up: the embedded engine's connect time (goal <= 10 s), and whether a command that does not fan out
  (a model under the fan-out threshold) imported Ray at all (goal: no).

The machine may be shared: run the cases back to back (this script does) and read the ratios, not the seconds.
Full depth (``--layers 28``) is runnable the same way; it takes tens of minutes per case.

Run: ``python bench/parallel_blocks.py [--tool localise-blocks|diagnose] [--width 0.6b|1.7b] [--layers 4] [--seq 32]
[--cases serial,cores,two-nodes] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llm_scale import BUDGETS, GIB, WIDTHS, build, watch_peaks  # noqa: E402

RAY = str(Path(sys.executable).with_name("ray"))
HEAD, NODE = "127.0.0.2", "127.0.0.3"


def child(args: argparse.Namespace) -> None:
    if args.tool == "diagnose":
        return child_diagnose(args)
    from qnn_debug.localise.blocks import BlockRequest, run_blocks

    t0 = time.perf_counter()
    r = run_blocks(BlockRequest(model=Path(args.model), reference_model=Path(args.reference), inputs=Path(args.inputs),
                                out=Path(args.out), force=True, inner="none", max_memory=args.max_memory,
                                workers=args.workers, cluster=args.cluster))
    print(json.dumps({"wall_s": time.perf_counter() - t0, "timings": r.timings,
                      "block": r.first_failing_block.first if r.first_failing_block else None,
                      "op": r.first_failing.op if r.first_failing else None, "ray_imported": "ray" in sys.modules}))


def child_diagnose(args: argparse.Namespace) -> None:
    """``diagnose`` of the faulted decoder against the clean one: streamed (the model does not fit one session
    within --max-memory), so its unit sessions are the jobs."""
    from qnn_debug import api

    t0 = time.perf_counter()
    r: Any = api.execute("diagnose", {"model": args.model, "reference_model": args.reference, "inputs": args.inputs,
                                      "out": args.out, "force": True, "max_memory": str(args.max_memory) if args.max_memory else None,
                                      "workers": args.workers, "cluster": args.cluster})
    t = r.timings
    timings = {"block_groups": t.get("htp_sim_jobs", 0), "workers": t.get("htp_sim_workers", 0),
               "engine_start_s": t.get("htp_sim_engine_start_s"), "htp_sim_blocks_s": t.get("htp_sim_wall_s"),
               "method": r.method}
    first = r.compare.first_failing if r.compare is not None else None
    print(json.dumps({"wall_s": time.perf_counter() - t0, "timings": timings, "block": None,
                      "op": first.op if first else None, "ray_imported": "ray" in sys.modules}))


def run_case(name: str, decoder: dict[str, Any], out: Path, extra: list[str], tool: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--tool", tool, "--model", decoder["faulty"]["rotary"], "--reference",
           decoder["clean"], "--inputs", decoder["inputs"], "--out", str(out / name), *extra]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with (out / f"{name}.stdout").open("w") as fo, (out / f"{name}.stderr").open("w") as fe, \
            subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
        peaks = watch_peaks(proc)
    if proc.returncode:
        return {"case": name, "error": (out / f"{name}.stderr").read_text()[-2000:]}
    doc = json.loads((out / f"{name}.stdout").read_text().strip().splitlines()[-1])
    layers = decoder["sizes"]["layers"]
    t = doc["timings"]
    return {"case": name, "right": (tool == "diagnose" or doc["block"] == layers - 2)
            and doc["op"] == f"/layers.{layers - 2}/self_attn/rotary_q/Concat",
            "wall_s": round(doc["wall_s"], 1), "process_s": round(time.perf_counter() - t0, 1),
            "jobs": int(t.get("block_groups", 0)), "workers": int(t.get("workers", 0)),
            "engine_start_s": t.get("engine_start_s"), "blocks_s": t.get("htp_sim_blocks_s"),
            "peak_rss_gib_per_process": round(max((v for v, _ in peaks.values()), default=0) / GIB, 2),
            "main_rss_gib": round(peaks.get(proc.pid, (0, ""))[0] / GIB, 2),
            "worker_rss_gib": round(max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0) / GIB, 2),
            "ray_imported": doc["ray_imported"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD, 0))
        return int(s.getsockname()[1])


def start_cluster(log_dir: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A head and a second node on loopback, one CPU each; their process groups are ours to stop."""
    skill = HERE.parent
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
               PYTHONPATH=os.pathsep.join([str(skill / "skill"), str(skill / "testkit"), os.environ.get("PYTHONPATH", "")]))
    port = _free_port()
    address = f"{HEAD}:{port}"
    temp = tempfile.mkdtemp(prefix="rq")
    common = ["start", "--block", "--num-cpus=1", f"--memory={3 * GIB}", "--object-store-memory=80000000"]
    procs = []
    for argv, log in ((["--head", f"--node-ip-address={HEAD}", f"--port={port}", "--include-dashboard=false",
                        "--disable-usage-stats", f"--temp-dir={temp}"], "head.log"),
                      ([f"--address={address}", f"--node-ip-address={NODE}"], "node.log")):
        with (log_dir / log).open("wb") as f:
            procs.append(subprocess.Popen([RAY, *common, *argv], env=env, stdout=f, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        time.sleep(8)
    procs[0].temp_dir = temp  # type: ignore[attr-defined]
    return address, procs


def stop_cluster(procs: list[subprocess.Popen[bytes]]) -> None:
    import signal

    for p in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    if procs:
        import shutil

        shutil.rmtree(getattr(procs[0], "temp_dir", ""), ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", choices=sorted(WIDTHS), default="0.6b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--cases", default="serial,cores,two-nodes")
    ap.add_argument("--workers", type=int, default=None, help="for the cores case (default: every core)")
    ap.add_argument("--max-memory", type=int, default=None,
                    help="bytes (diagnose default: llm_scale's budget for the width, so the model streams)")
    ap.add_argument("--tool", choices=["localise-blocks", "diagnose"], default="localise-blocks")
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
    out = Path(tempfile.mkdtemp(prefix="qnn-debug-parallel-bench-"))
    cores = args.workers or machine_cores()
    max_memory = args.max_memory or (BUDGETS[args.width] if args.tool == "diagnose" else None)
    mem = ["--max-memory", str(max_memory)] if max_memory else []
    rows: list[dict[str, Any]] = []
    cases = args.cases.split(",")
    if "serial" in cases:
        rows.append(run_case("serial", decoder, out, ["--workers", "1", *mem], args.tool))
    if "cores" in cases:
        rows.append(run_case("cores", decoder, out, ["--workers", str(cores), *mem], args.tool))
    if "two-nodes" in cases:
        address, procs = start_cluster(out)
        try:
            rows.append(run_case("two-nodes", decoder, out, ["--cluster", address, *mem], args.tool))
        finally:
            stop_cluster(procs)
    serial = next((r for r in rows if r["case"] == "serial" and "wall_s" in r), None)
    for r in rows:
        if serial and "wall_s" in r:
            r["ratio_to_serial"] = round(r["wall_s"] / serial["wall_s"], 3)
            worker_cores = {"serial": 1, "cores": cores, "two-nodes": 2}[r["case"]]
            r["speedup_per_worker_core"] = round(serial["wall_s"] / r["wall_s"] / worker_cores, 3)
    summary = {"tool": args.tool, "width": args.width, "layers": args.layers, "seq": args.seq, "machine_cores": machine_cores(),
               "load_avg_1min": os.getloadavg()[0], "rows": rows,
               "goals": {"cores_ratio_max": 0.6, "engine_start_s_max": 10.0}}
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"logs and outputs in {out}")
    print(f"{args.tool}: {args.width} width x {args.layers} layers, prefill {args.seq}; {machine_cores()} cores; load "
          f"{summary['load_avg_1min']:.1f} (a shared machine: read the ratios)")
    for r in rows:
        if "error" in r:
            print(f"  {r['case']:<10} FAILED: {r['error'][-400:]}")
            continue
        print(f"  {r['case']:<10} wall {r['wall_s']:>7.1f} s  x{r.get('ratio_to_serial', 1.0):.2f} serial  "
              f"speed-up/worker core {r.get('speedup_per_worker_core', 1.0):.2f}  jobs {r['jobs']}  "
              f"engine start {r['engine_start_s'] or 0:.1f} s  peak main {r['main_rss_gib']:.2f} / other processes "
              f"{r['worker_rss_gib']:.2f} GiB  "
              f"ray imported {r['ray_imported']}  right {r['right']}")


if __name__ == "__main__":
    main()
