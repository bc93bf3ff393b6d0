"""Can ``compare`` keep up with the disk on LLM-sized runs, in bounded memory?

Generates a synthetic pair of runs (default 1,400 tensors of [1, 128, 2048]: fp32 reference, fp16 target,
2.05 GiB in total, with a few outlier channels like real LLM activations), then times, in fresh child
processes and interleaved so machine load hits both alike:

- **read**: merely reading every tensor file of both runs once (``readinto`` a reused buffer);
- **compare**: ``compare_runs`` on the same two runs (all metrics for every tensor, localisation, verdict).

Ratio = read time / compare time (the comparison's speed as a fraction of pure reading). Both are
measured with a cold page cache (``posix_fadvise(DONTNEED)`` on every file first, so bytes come from the
disk, as for runs a user has just copied or written earlier) and with a warm one. Targets: cold ratio
>= 0.7, warm ratio >= 0.5 (the comparison is compute-bound once the bytes are cached) and the compare
child's peak RSS <= 512 MiB. Each child also reports its CPU seconds (all threads): on a machine shared
with other work the CPU-time ratio says how much work the comparison does per byte, whatever the load.
The data live in a temporary directory that is removed at the end.

Run: ``python bench/compare_scale.py [--tensors N] [--rounds R] [--keep DIR] [--json]``; exits 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 0.7
TARGET_WARM_RATIO = 0.5
TARGET_RSS_MIB = 512
SHAPE = (1, 128, 2048)


def generate(root: Path, tensors: int) -> int:
    """Write the reference (fp32) and target (fp16) runs; returns the total bytes of tensor files."""
    import numpy as np

    from qnn_debug.runstore import RunRecord, RunWriter

    rng = np.random.default_rng(0)
    bases = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    for b in bases:
        b[..., rng.choice(SHAPE[-1], 8, replace=False)] *= 60.0  # outlier channels, as in LLM activations
    ref = RunWriter(root / "reference", RunRecord(role="reference", target="synthetic", precision="fp32"))
    tgt = RunWriter(root / "target", RunRecord(role="target", target="synthetic", precision="fp16"))
    for i in range(tensors):
        r = bases[i % 4] * np.float32(1.0 + 0.001 * i)
        name = f"layers.{i // 7}.out{i % 7}"
        ref.add_tensor(name, r, op=f"op{i}", op_type="MatMul", position=i)
        tgt.add_tensor(name, r.astype(np.float16), op=f"op{i}", op_type="MatMul", position=i)
    ref.finish()
    tgt.finish()
    return sum(p.stat().st_size for p in root.rglob("*.npy"))


def drop_cache(root: Path) -> None:
    """Evict the runs' pages from the page cache (clean pages; no privileges needed)."""
    os.sync()
    for p in root.rglob("*.npy"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def child_read(root: Path) -> dict[str, float]:
    files = sorted((root / "reference" / "tensors").glob("*.npy")) + sorted((root / "target" / "tensors").glob("*.npy"))
    buf = bytearray(max(p.stat().st_size for p in files))
    view = memoryview(buf)
    from qnn_debug.compare.pipeline import PREFETCH_AHEAD

    start, cpu = time.perf_counter(), _cpu()
    total = 0
    ahead = 2 * PREFETCH_AHEAD  # the comparison hints PREFETCH_AHEAD pairs, i.e. twice as many files
    for p in files[:ahead]:
        _willneed(p)
    for i, p in enumerate(files):
        if i + ahead < len(files):  # the same read-ahead the comparison gives the kernel
            _willneed(files[i + ahead])
        with open(p, "rb", buffering=0) as f:
            total += f.readinto(view)
    return {"seconds": time.perf_counter() - start, "cpu_s": _cpu() - cpu, "bytes": total}


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _willneed(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def child_compare(root: Path) -> dict[str, float | str]:
    from qnn_debug.compare.importers import ReferenceSide
    from qnn_debug.compare.metrics import kernel_status
    from qnn_debug.compare.pipeline import compare_runs
    from qnn_debug.runstore import load_run

    side = ReferenceSide(load_run(root / "reference"), None, None)
    target = load_run(root / "target")
    start, cpu = time.perf_counter(), _cpu()
    result = compare_runs(side, target)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    worst = min(r.metrics["sqnr_db"] or 0.0 for r in result.tensors)
    return {"seconds": seconds, "cpu_s": cpu, "tensors": len(result.tensors), "verdict": result.verdict.kind, "worst_sqnr_db": worst,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "comparator": kernel_status()}


def run_child(mode: str, root: Path) -> dict[str, float | str]:
    from qnn_debug import process

    done = process.run([sys.executable, __file__, "--child", mode, str(root)], timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"bench child {mode} failed with {done.status()}: {done.stderr[-2000:]}")
    result: dict[str, float | str] = json.loads(done.text.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", type=int, default=1400)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="generate into DIR and keep it (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, root = args.child
        print(json.dumps(child_read(Path(root)) if mode == "read" else child_compare(Path(root))))
        return 0

    root = args.keep or Path(tempfile.mkdtemp(prefix="qnn-debug-bench-scale-"))
    try:
        t0 = time.perf_counter()
        size = generate(root, args.tensors)
        gen_s = time.perf_counter() - t0
        timings: dict[str, list[float]] = {"read_cold": [], "compare_cold": [], "read_warm": [], "compare_warm": []}
        last: dict[str, float | str] = {}
        rss: list[float] = []
        cpu: dict[str, list[float]] = {"read_warm": [], "compare_warm": []}
        for _ in range(args.rounds):
            for mode in ("read", "compare"):
                drop_cache(root)
                res = run_child(mode, root)
                timings[f"{mode}_cold"].append(float(res["seconds"]))
                if mode == "compare":
                    rss.append(float(res["peak_rss_mib"]))
                    last = res
            run_child("read", root)  # warm the cache
            for mode in ("read", "compare"):
                res = run_child(mode, root)
                timings[f"{mode}_warm"].append(float(res["seconds"]))
                cpu[f"{mode}_warm"].append(float(res["cpu_s"]))
                if mode == "compare":
                    rss.append(float(res["peak_rss_mib"]))
        best = {k: min(v) for k, v in timings.items()}
        report = {
            "tensors": args.tensors, "shape": list(SHAPE), "bytes": size, "gib": round(size / 2**30, 3),
            "generate_s": round(gen_s, 1),
            "read_cold_s": round(best["read_cold"], 3), "compare_cold_s": round(best["compare_cold"], 3),
            "ratio_cold": round(best["read_cold"] / best["compare_cold"], 3),
            "read_warm_s": round(best["read_warm"], 3), "compare_warm_s": round(best["compare_warm"], 3),
            "ratio_warm": round(best["read_warm"] / best["compare_warm"], 3),
            "cpu_ratio_warm": round(min(cpu["read_warm"]) / min(cpu["compare_warm"]), 3),
            "read_cold_gb_s": round(size / best["read_cold"] / 1e9, 2),
            "compare_cold_gb_s": round(size / best["compare_cold"] / 1e9, 2),
            "compare_warm_gb_s": round(size / best["compare_warm"] / 1e9, 2),
            "peak_rss_mib": round(max(rss), 1), "all_runs_s": {k: [round(x, 3) for x in v] for k, v in timings.items()},
            "median_ratio_cold": round(statistics.median(timings["read_cold"]) / statistics.median(timings["compare_cold"]), 3),
            "verdict": last.get("verdict"), "comparator": last.get("comparator"),
        }
        ok = (report["ratio_cold"] >= TARGET_RATIO and report["ratio_warm"] >= TARGET_WARM_RATIO
              and report["peak_rss_mib"] <= TARGET_RSS_MIB)
        report["targets"] = {"ratio_cold": f">= {TARGET_RATIO}", "ratio_warm": f">= {TARGET_WARM_RATIO}",
                             "peak_rss_mib": f"<= {TARGET_RSS_MIB}", "met": ok}
        if args.json:
            print(json.dumps(report))
        else:
            print(f"compare_scale: {args.tensors} x {list(SHAPE)} fp16 vs fp32 = {report['gib']} GiB")
            print(f"  cold cache: read {report['read_cold_s']} s ({report['read_cold_gb_s']} GB/s), "
                  f"compare {report['compare_cold_s']} s ({report['compare_cold_gb_s']} GB/s) -> ratio {report['ratio_cold']} "
                  f"(target >= {TARGET_RATIO})")
            print(f"  warm cache: read {report['read_warm_s']} s, compare {report['compare_warm_s']} s "
                  f"({report['compare_warm_gb_s']} GB/s) -> ratio {report['ratio_warm']} (target >= {TARGET_WARM_RATIO}); "
                  f"CPU-time ratio {report['cpu_ratio_warm']}")
            print(f"  compare peak RSS {report['peak_rss_mib']} MiB (target <= {TARGET_RSS_MIB}); verdict {report['verdict']}; "
                  f"comparator: {report['comparator']}")
            print("  " + ("targets met" if ok else "TARGET MISSED"))
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
