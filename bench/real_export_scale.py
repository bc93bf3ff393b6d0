"""The tools on MNN's real llmexport output at Qwen3-0.6B width: right block and op, time and peak RSS.

Model: a random-weight Qwen3 from a transformers config at 0.6B width (hidden 1024, 16/8 heads of 128, FFN 3072,
vocab 151936, 28 layers; ``--layers`` fewer for a quicker run), built in the exporter venv
(``QNN_DEBUG_LLMEXPORT_VENV``, default ``.venv-llmexport``: ``make setup-llmexport``) with the test tier's builder
(``tests/real_export_build.py``), then ``llmexport.py --export onnx`` on it (a subprocess with llmexport's folder on
``PYTHONPATH`` and a no-op ``pip`` first on ``PATH``, as the tier runs it). Both are cached in
``bench/.cache/real-<width>-L<layers>`` (gitignored). One fault is injected into the real ``llm.onnx``
(``qnn_debug_testkit.real_faults.rotary_without_neg`` in layer L-2; the faulted folder hard-links the clean
``llm.onnx.data``), and each tool runs on it through the engine API exactly as the CLI does (so through the
preparation step: FusedAttention lowered, prefill 128 from llm_config.json, inputs as the runtime builds them),
with the clean ``llm.onnx`` as ``--reference-model``, in a fresh child process:

- ``blocks``: ``localise-blocks --inner none``; ``diagnose``: baseline, dump (chunked marking) and compare.

Printed per tool: right block and op (``/blocks.{L-2}/self_attn/Concat_3``), wall time, the simulator's own time,
the tool's overhead (wall - simulator) and its ratio to the simulator time, peak RSS of the tool's process and of
its workers (``/proc`` VmHWM, polled) against the weight bytes. Build times and sizes are printed too.

Run: ``python bench/real_export_scale.py [--layers 28] [--tools blocks,diagnose] [--json]`` (a full run takes
tens of minutes on 2 cores: ~1 min to build, ~30 s to export, each tool several minutes).
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
GIB = 1 << 30
WIDTH = {"hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8,
         "head_dim": 128, "vocab_size": 151936, "seed": 0}
MAX_MEMORY = 3 * GIB
OVERHEAD_TARGET = 0.5

_BUILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import real_export_build as b
b.TEXT_MODELS["scale"] = json.loads(sys.argv[2])
out = Path(sys.argv[3]); out.mkdir(parents=True, exist_ok=True)
info = b.build_qwen3("scale", out)
(out / "toy_model.json").write_text(json.dumps(info), encoding="utf-8")
"""


def _tier() -> Any:
    sys.path.insert(0, str(REPO / "tests"))
    import real_exports

    return real_exports


def _peak_self() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def build(cache: Path, layers: int) -> dict[str, Any]:
    """The Hugging Face folder and its ``--export onnx`` (cached), with build times and peak RSS."""
    tier = _tier()
    root = cache / f"real-0.6b-L{layers}"
    done = root / "export.json"
    if done.is_file():
        return dict(json.loads(done.read_text(encoding="utf-8")))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    py = str(tier._python())
    env = {**tier._base_env(), "PATH": f"{tier._shim_dir(cache)}:{os.environ.get('PATH', '')}"}
    spec = {**WIDTH, "num_hidden_layers": layers}
    t0 = time.perf_counter()
    tier._run([py, "-c", _BUILD, str(REPO / "tests"), json.dumps(spec), str(root / "hf")], root / "build.log", root,
              env, "building the 0.6B-width model")
    build_s = time.perf_counter() - t0
    folder, _ = tier._exporter()
    env = {**env, "PYTHONPATH": folder, "PATH": f"{tier._shim_dir(cache)}:{tier.EXPORT_VENV / 'bin'}:{os.environ['PATH']}"}
    t0 = time.perf_counter()
    tier._run([py, str(Path(folder) / "llmexport.py"), "--path", str(root / "hf"), "--dst_path", str(root / "clean"),
               "--export", "onnx"], root / "export.log", root, env, "llmexport --export onnx")
    export_s = time.perf_counter() - t0
    data = root / "clean" / "onnx" / "llm.onnx.data"
    doc = {"layers": layers, "build_s": round(build_s, 1), "export_s": round(export_s, 1),
           "children_peak_rss_gib": round(_peak_self() / GIB, 2), "onnx_gib": round(data.stat().st_size / GIB, 2),
           "clean": str(root / "clean"), "weight_bytes": data.stat().st_size}
    shutil.rmtree(root / "hf")  # 3.3 GB of fp32 safetensors: only the export is needed again
    done.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return doc


def faulted(doc: dict[str, Any], root: Path, layer: int) -> dict[str, Any]:
    """The rotary fault in layer ``layer`` of a copy whose data file is a hard link to the clean one."""
    sys.path.insert(0, str(REPO / "testkit"))
    from qnn_debug_testkit import real_faults as F

    clean = Path(doc["clean"])
    staged = root / "clean-graph"  # the clean folder without its data file: copied, then the data linked in
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(clean, staged, ignore=shutil.ignore_patterns("llm.onnx.data", "*.qnn-debug.*"))
    dst = root / f"rotary-L{layer}"
    shutil.rmtree(dst, ignore_errors=True)
    fault = F.rotary_without_neg(staged, dst, layer)
    os.link(clean / "onnx" / "llm.onnx.data", dst / "onnx" / "llm.onnx.data")
    shutil.rmtree(staged)
    return fault.model_dump()


def child(args: argparse.Namespace) -> None:
    """One tool through the engine API (the CLI's path: the preparation step included)."""
    from qnn_debug.api import execute

    t0 = time.perf_counter()
    common = {"model": args.model, "reference_model": args.reference, "out": args.out, "force": True,
              "max_memory": str(MAX_MEMORY)}
    doc: dict[str, Any]
    if args.tool == "blocks":
        r: Any = execute("localise_blocks", {**common, "inner": "none"})
        t = r.timings
        doc = {"verdict": r.verdict, "block": r.first_failing_block.first if r.first_failing_block else None,
               "op": r.first_failing.op if r.first_failing else None,
               "simulator_s": float(t.get("htp_sim_blocks_s", 0.0)) + float(t.get("htp_sim_ops_s", 0.0))}
    else:
        from qnn_debug.localise.cut import layer_of

        d: Any = execute("diagnose", common)
        c = d.compare
        ff = c.first_failing if c is not None else None
        sim = 0.0
        run_json = Path(d.target_run) / "run.json" if d.target_run else None
        if run_json is not None and run_json.is_file():
            sim = sum(json.loads(run_json.read_text(encoding="utf-8"))["extra"].get("simulator_s", {}).values())
        bis = d.fallback.bisect if d.fallback is not None else None
        if bis is not None:
            sim += float(bis.timings.get("htp_sim_pieces_s", 0.0))
            ff = bis.first_failing
        op = ff.op if ff is not None else None
        doc = {"verdict": c.verdict.kind if c is not None else (bis.verdict if bis else None), "op": op,
               "block": layer_of(op or ""), "simulator_s": sim}
    doc["wall_s"] = time.perf_counter() - t0
    print(json.dumps(doc))


def run_tool(tool: str, fault: dict[str, Any], clean: Path, out: Path, weights: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from llm_scale import watch_peaks

    cmd = [sys.executable, __file__, "--child", "--tool", tool, "--model", fault["file"],
           "--reference", str(clean / "onnx" / "llm.onnx"), "--out", str(out / tool)]
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / tool, ignore_errors=True)  # a stopped earlier run leaves its output folder claimed
    log_out, log_err = out / f"{tool}.stdout", out / f"{tool}.stderr"
    with log_out.open("w") as fo, log_err.open("w") as fe, subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
        peaks = watch_peaks(proc)
    if proc.returncode:
        return {"tool": tool, "right": False, "error": log_err.read_text()[-2000:]}
    doc = json.loads(log_out.read_text().strip().splitlines()[-1])
    main_rss = peaks.get(proc.pid, (0, ""))[0]
    worker_rss = max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0)
    sim = float(doc["simulator_s"])
    overhead = doc["wall_s"] - sim
    return {"tool": tool, "right": doc["block"] == fault["layer"] and doc["op"] == fault["op"], **doc,
            "wall_s": round(doc["wall_s"], 1), "simulator_s": round(sim, 1), "overhead_s": round(overhead, 1),
            "overhead_ratio": round(overhead / sim, 3) if sim else None,
            "main_rss_gib": round(main_rss / GIB, 2), "worker_rss_gib": round(worker_rss / GIB, 2),
            "main_rss_per_weight": round(main_rss / weights, 3), "worker_rss_per_weight": round(worker_rss / weights, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tools", default="blocks,diagnose")
    ap.add_argument("--cache", type=Path, default=HERE / ".cache")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tool", help=argparse.SUPPRESS)
    for name in ("model", "reference", "out"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    doc = build(args.cache, args.layers)
    root = Path(doc["clean"]).parent
    fault = faulted(doc, root, args.layers - 2)
    cases = [run_tool(t, fault, Path(doc["clean"]), root / "runs", doc["weight_bytes"])
             for t in args.tools.split(",") if t]
    report = {**doc, "fault": fault, "cases": cases}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"real llmexport ONNX, 0.6B width x {args.layers} layers: model built in {doc['build_s']} s, exported in "
          f"{doc['export_s']} s (children's peak RSS {doc['children_peak_rss_gib']} GiB), llm.onnx.data "
          f"{doc['onnx_gib']} GiB; fault: {fault['detail']}")
    for c in cases:
        if "error" in c:
            print(f"  {c['tool']:<8} FAILED: {c['error'].splitlines()[-1] if c['error'] else ''}")
            continue
        print(f"  {c['tool']:<8} {'right' if c['right'] else 'WRONG'} block {c['block']} op {c['op']} ({c['verdict']})")
        print(f"           wall {c['wall_s']} s, simulator {c['simulator_s']} s, overhead {c['overhead_s']} s = "
              f"{c['overhead_ratio']}x the simulator (target <= {OVERHEAD_TARGET})")
        print(f"           peak RSS main {c['main_rss_gib']} GiB ({c['main_rss_per_weight']}x weights), workers "
              f"{c['worker_rss_gib']} GiB ({c['worker_rss_per_weight']}x weights)")


if __name__ == "__main__":
    main()
