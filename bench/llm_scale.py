"""Block localisation at real LLM size: wall time against the simulator's own time, peak RSS against the weights.

Model: a Qwen3-shaped decoder at 0.6B width (hidden 1024, 16/8 heads of 128, FFN 3072, vocab 151936,
28 layers) or, with ``--width 1.7b``, 1.7B width (hidden 2048, FFN 6144, 16/8 heads of 128; 8 layers by
default), prefill 128, fp32 weights in external data, built once by :mod:`qnn_debug_testkit.sized` into a
cache folder (``bench/.cache``, gitignored). Two faulty copies share the clean copy's data file:

- ``rotary``: rotate_half without its Neg in layer L-2 (a real bug): expected first failing block
  ``layer L-2`` and op ``/layers.{L-2}/self_attn/rotary_q/Concat``;
- ``spike``: two residual channels at 400 on token 0 in layer 1 (fp16 range, not a bug): expected
  ``fp16_range`` at ``/layers.2/input_layernorm/Pow``.

Each case runs one tool in a fresh child process: ``localise-blocks`` with ``--inner`` (default ``diagnose``,
as the CLI: the first bad block cut out and diagnosed; ``none``: the block and op stages only;
``qnn_debug.localise.blocks.run_blocks``; the inner diagnosis' simulator sessions count as simulator time), ``diagnose`` (``qnn_debug.diagnose.diagnose``: at this size its
baseline is built piece by piece and the model is marked in chunks, piece by piece) and ``bisect``
(``qnn_debug.localise.bisect.run_bisect``: the cuts run as a chain of pieces), all with ``--max-memory``.
The peak RSS of that process (the tool's main process) and of every process below it (the simulator
worker) is read from ``/proc/PID/status`` (VmHWM) while they run. Printed per case: wall time, the
simulator's own time (sessions and runs in the worker: block and op stages; the unmarked and the marked
chain; the probes' pieces), the tool's overhead (wall - simulator) and its ratio to the simulator time
(target <= 0.5), peak RSS per process and its ratio to the weight bytes (target <= 4 GiB at 1.7B width),
and whether block and op are right.

Run: ``python bench/llm_scale.py [--width 0.6b|1.7b] [--layers N] [--faults rotary,spike] [--tools blocks]
[--inner diagnose|bisect|none] [--json]``.
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
BUDGETS = {"0.6b": 3 * GIB, "1.7b": 4 * GIB}
OVERHEAD_TARGET = 0.5
RSS_TARGET = 4 * GIB


def build(cache: Path, width: str, layers: int, seq: int) -> dict[str, Any]:
    from qnn_debug_testkit.sized import Qwen3Sizes, SizedDecoder, build_sized_decoder
    from qnn_debug_testkit.tiny_graph import GraphFaults

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
    """One tool's run in this process; prints its result, its timings and the simulator's own time."""
    from qnn_debug.localise.cut import layer_of

    t0 = time.perf_counter()
    model, reference, inputs = _prepared(Path(args.model), Path(args.reference), Path(args.inputs))
    out = Path(args.out)
    doc: dict[str, Any]
    if args.tool == "blocks":
        from qnn_debug.localise.blocks import BlockRequest, run_blocks

        r = run_blocks(BlockRequest(model=model, reference_model=reference, inputs=inputs, out=out, force=True,
                                    inner=args.inner, max_memory=args.max_memory, timeout=args.timeout))
        bad = r.first_failing_block
        t = r.timings
        inner_sim = _inner_simulator_s(Path(r.block_diagnosis), t) if r.block_diagnosis else 0.0
        doc = {"timings": t, "verdict": r.verdict, "block": None if bad is None else bad.first,
               "op": r.first_failing.op if r.first_failing else None,
               "range_op": r.fp16_range.op if r.fp16_range else None, "inner_simulator_s": inner_sim,
               "simulator_s": float(t.get("htp_sim_blocks_s", 0.0)) + float(t.get("htp_sim_ops_s", 0.0)) + inner_sim}
    elif args.tool == "diagnose":
        from qnn_debug.diagnose import diagnose

        d = diagnose(model, out, inputs=inputs, reference_model=reference, force=True, max_memory=args.max_memory,
                     timeout=args.timeout)
        c = d.compare
        ff = c.first_failing if c is not None else None
        rng = (c.verdict.evidence.get("fp16_range") or {}) if c is not None else {}
        sim = 0.0
        run_json = Path(d.target_run) / "run.json"
        if run_json.is_file():
            sim = sum(json.loads(run_json.read_text(encoding="utf-8"))["extra"].get("simulator_s", {}).values())
        bis = d.fallback.bisect if d.fallback is not None else None
        if bis is not None:
            sim += float(bis.timings.get("htp_sim_pieces_s", 0.0))
            ff = bis.first_failing
            rng = {"op": bis.fp16_range.op} if bis.fp16_range else {}
        op = ff.op if ff is not None else None
        doc = {"timings": d.timings, "method": d.method,
               "verdict": f"{c.verdict.kind}/{c.verdict.pattern}" if c is not None else (bis.verdict if bis else None),
               "op": op, "block": layer_of(op or ""), "simulator_s": sim,
               "range_op": rng.get("op") if isinstance(rng, dict) else None,
               "summary": (c.verdict.summary if c is not None else bis.summary if bis else "")[:600]}
    else:
        from qnn_debug.localise.bisect import BisectRequest, run_bisect

        b = run_bisect(BisectRequest(model=model, reference_model=reference, inputs=inputs, out=out, force=True,
                                     max_memory=args.max_memory, timeout=args.timeout))
        op = b.first_failing.op if b.first_failing else None
        doc = {"timings": b.timings, "verdict": b.verdict, "op": op, "block": layer_of(op or ""),
               "range_op": b.fp16_range.op if b.fp16_range else None, "probes": len(b.probes),
               "simulator_s": float(b.timings.get("htp_sim_pieces_s", 0.0))}
    doc["wall_s"] = time.perf_counter() - t0
    print(json.dumps(doc))


def _prepared(model: Path, reference: Path, inputs: Path) -> tuple[Path, Path, Path]:
    """What the CLI runs for these arguments (its one preparation step, e.g. a decoder's ``logits_index`` folded to
    the value fed); the engine calls below are the CLI's without its printing."""
    from qnn_debug.llm.onnx_export import prepare_model

    p = prepare_model(model, inputs=str(inputs))
    r = prepare_model(reference, inputs=str(inputs))
    return Path(p.model), Path(r.model), Path(p.inputs or inputs)


def _inner_simulator_s(out: Path, timings: dict[str, float]) -> float:
    """The simulator's own time in the inner diagnosis of the bad block, from its run records: a full dump's session
    creations and runs (the dump stage's time when its marked graph did not build and left no record), a chunked
    dump's chunks, a streamed one's unmarked and marked chains."""
    total = 0.0
    full = out / "htp-sim" / "run.json"
    if not full.is_file():
        total += float(timings.get("diagnose_dump_s", 0.0))
    for run_json in out.rglob("run.json"):
        extra = json.loads(run_json.read_text(encoding="utf-8")).get("extra") or {}
        total += sum(float(v) for v in (extra.get("simulator_s") or {}).values())
        total += sum(float(v) for k, v in (extra.get("timings") or {}).items()
                     if k.startswith(("create_", "run_", "refetch")))
        if not extra.get("simulator_s"):
            total += sum(float(c.get("seconds", 0.0)) for c in extra.get("chunks") or [])
    return total


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


def _cmd(pid: int) -> str:
    """What a process runs (its command line, shortened): which peak is whose."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace").rsplit("/", 1)[-1] for a in argv[:4] if a)[:80]


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
                    peaks[pid] = (st[1], peaks.get(pid, (0, ""))[1] or _cmd(pid))
            time.sleep(0.5)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    proc.wait()
    thread.join()
    return peaks


def run_case(decoder: dict[str, Any], tool: str, fault: str, out: Path, max_memory: int | None,
             inner: str = "none") -> dict[str, Any]:
    layers = decoder["sizes"]["layers"]
    model = decoder["faulty"][fault]
    reference = decoder["clean"] if fault == "rotary" else model  # the spike is in the export itself
    name = f"{tool}-{fault}"
    label = tool if tool != "blocks" else f"blocks/{inner}"
    cmd = [sys.executable, __file__, "--child", "--tool", tool, "--model", model, "--reference", reference,
           "--inputs", decoder["inputs"], "--out", str(out / name)]
    if max_memory:
        cmd += ["--max-memory", str(max_memory)]
    if tool == "blocks":
        name += "" if inner == "none" else f"-{inner}"
        cmd[cmd.index("--out") + 1] = str(out / name)
        cmd += ["--inner", inner]
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    import shutil

    shutil.rmtree(out / name, ignore_errors=True)  # a kept run's job results would be resumed, not measured
    log_out, log_err = out / f"{name}.stdout", out / f"{name}.stderr"
    with log_out.open("w") as fo, log_err.open("w") as fe, subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
        peaks = watch_peaks(proc)
    stdout, stderr = log_out.read_text(), log_err.read_text()
    total = time.perf_counter() - t0
    if proc.returncode:
        return {"tool": label, "fault": fault, "right": False, "meets": False, "error": stderr[-2000:]}
    doc = json.loads(stdout.strip().splitlines()[-1])
    doc["main_rss"] = peaks.get(proc.pid, (0, ""))[0]
    doc["processes"] = sorted(([round(v / GIB, 2), cmd] for v, cmd in peaks.values()), reverse=True)
    doc["worker_rss"] = max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0)
    t = doc["timings"]
    sim = float(doc["simulator_s"])
    overhead = doc["wall_s"] - sim
    if fault == "rotary":
        right = doc["block"] == layers - 2 and doc["op"] == f"/layers.{layers - 2}/self_attn/rotary_q/Concat"
    else:
        right = (doc["range_op"] == "/layers.2/input_layernorm/Pow"
                 or (tool == "diagnose" and doc["op"] == "/layers.2/input_layernorm/Pow"))
    weights = decoder["weight_bytes"]
    return {"tool": label, "fault": fault, "right": right, "verdict": doc["verdict"], "block": doc["block"],
            "op": doc["op"], "method": doc.get("method"), "summary": doc.get("summary"),
            "fp16_range_op": doc["range_op"], "wall_s": round(doc["wall_s"], 1), "process_s": round(total, 1),
            "simulator_s": round(sim, 1), "inner_simulator_s": round(float(doc.get("inner_simulator_s", 0.0)), 1),
            "overhead_s": round(overhead, 1),
            "overhead_ratio": round(overhead / sim, 3) if sim else None,
            "main_rss_gib": round(doc["main_rss"] / GIB, 2), "worker_rss_gib": round(doc["worker_rss"] / GIB, 2),
            "main_rss_per_weight": round(doc["main_rss"] / weights, 3),
            "worker_rss_per_weight": round(doc["worker_rss"] / weights, 3),
            "meets": bool(right and sim and overhead <= OVERHEAD_TARGET * sim
                          and max(doc["main_rss"], doc["worker_rss"]) <= RSS_TARGET),
            "timings": t, "processes": doc["processes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", choices=sorted(WIDTHS), default="0.6b")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--faults", default="rotary,spike")
    ap.add_argument("--tools", default="blocks,diagnose,bisect", help="any of blocks, diagnose, bisect")
    ap.add_argument("--tool", choices=["blocks", "diagnose", "bisect"], help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="the tool's --timeout (full depth on a shared machine may need more)")
    ap.add_argument("--inner", choices=["diagnose", "bisect", "none"], default="diagnose",
                    help="localise-blocks' --inner (default diagnose, as the CLI; none: the block and op stages only)")
    ap.add_argument("--cache", type=Path, default=HERE / ".cache")
    ap.add_argument("--max-memory", type=int, default=None,
                    help="per-process budget in bytes (default 3 GiB at 0.6B width, 4 GiB at 1.7B: its 1.2 GB head "
                         "runs alone in a simulator session in diagnose and bisect)")
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
    args.max_memory = args.max_memory or BUDGETS[args.width]
    out = args.cache / "runs" / f"{args.width}-L{layers}"
    cases = []
    for tool in [t for t in args.tools.split(",") if t]:
        for fault in [f for f in args.faults.split(",") if f]:
            cases.append(run_case(decoder, tool, fault, out, args.max_memory, args.inner))
            print(json.dumps(cases[-1]), file=sys.stderr, flush=True)
    report = {"width": args.width, "layers": layers, "seq": args.seq, "weight_gib": round(decoder["weight_bytes"] / GIB, 2),
              "build_s": decoder.get("build_s"), "cases": cases, "meets_targets": all(c["meets"] for c in cases)}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{args.width} width, {layers} layers, prefill {args.seq}: {report['weight_gib']} GiB of fp32 weights "
          f"(built in {report['build_s']} s, cached)")
    for c in cases:
        if "error" in c:
            print(f"  {c['tool']:<14} {c['fault']:<7} FAILED: {c['error'].splitlines()[-1] if c['error'] else ''}")
            continue
        print(f"  {c['tool']:<14} {c['fault']:<7} {'right' if c['right'] else 'WRONG'} block {c['block']} op {c['op']} "
              f"range {c['fp16_range_op']} ({c['verdict']})")
        print(f"          wall {c['wall_s']} s, simulator {c['simulator_s']} s (inner {c['inner_simulator_s']} s), overhead {c['overhead_s']} s "
              f"= {c['overhead_ratio']}x the simulator (target <= {OVERHEAD_TARGET})")
        print(f"          peak RSS main {c['main_rss_gib']} GiB ({c['main_rss_per_weight']}x weights), "
              f"simulator worker {c['worker_rss_gib']} GiB ({c['worker_rss_per_weight']}x weights)")
    print(f"targets {'met' if report['meets_targets'] else 'NOT met'}")


if __name__ == "__main__":
    main()
