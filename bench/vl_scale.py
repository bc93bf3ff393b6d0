"""localise-blocks, diagnose and bisect on a Qwen3-VL export at Qwen3-VL-2B's widths and full depth: the vision
encoder (24 blocks, hidden 1024, deepstack after blocks 5/11/17, 1024 patches as a 512x512 image gives) and the
M-RoPE decoder (28 layers, hidden 2048, FFN 6144, vocab 151936, the image's 256 tokens in its prompt), each with
one injected fault: right block and op, wall time, the simulator's own time, peak RSS per process.

Folders from ``qnn_debug_testkit.vl`` (``size="qwen3-vl-2b"``, random weights, fp32 in external data, no MNN
conversion), built once into ``bench/.cache``: a clean one and one per fault. The faults change graphs, not
weights, so a faulty folder's data files are hard links to the clean one's (checked equal first): three folders
take the disk of one. Faults: ``vision_rotary_swapped`` in vision block ``--vision-fault-block`` (default 20,
after every deepstack block) and ``mrope_chunked`` in decoder layer ``--text-fault-layer`` (default 26).

Each case runs in a fresh child process (``bench/llm_scale.py --child``), the engine at its defaults (on a machine
with more than one core the block jobs fan out), ``--max-memory`` per process.

Each run folder is measured (bytes written, against the disk check's estimate: ``qnn_debug.disk_room``) and
removed after its case (``--keep-runs`` keeps them); a case whose estimate exceeds the free disk is not started.

Run: ``python bench/vl_scale.py [--graphs visual,llm] [--tools blocks,diagnose,bisect] [--max-memory BYTES]
[--keep-runs] [--json]``. It takes tens of minutes per case on two cores.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llm_scale import GIB, RSS_TARGET, watch_peaks  # noqa: E402

FAULTS = {"visual": "vision_rotary_swapped", "llm": "mrope_chunked"}
EXPECTED_OP = {"visual": "/blocks.{n}/self_attn/rotary_q/Mul", "llm": "/layers.{n}/self_attn/rotary_q/Mul"}
GRID = (32, 32)  # 512x512 pixels in 16-px patches: generate_llm_qnn.py's vision prefill of 1024 patches


def _build_one(folder: Path, fault: str | None, layer: int | None) -> dict[str, Any]:
    from qnn_debug_testkit.vl import VLExportRequest, build_vl_export

    done = folder.with_suffix(".json")
    if done.is_file():
        return dict(json.loads(done.read_text(encoding="utf-8")))
    if folder.exists():  # an interrupted build
        import shutil

        shutil.rmtree(folder)
    t0 = time.perf_counter()
    built = build_vl_export(folder, VLExportRequest(size="qwen3-vl-2b", image_grid=GRID, frames=1, mnn=False,
                                                    fault=fault, fault_layer=layer, external_data=True))
    doc = {**json.loads(built.model_dump_json()), "build_s": round(time.perf_counter() - t0, 1)}
    done.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return doc


def _link_data(clean: Path, faulty: Path) -> None:
    """The faulty folder's weight files become hard links to the clean folder's, when their bytes are equal."""
    for name in ("visual.onnx.data", "llm.onnx.data"):
        a, b = clean / "onnx" / name, faulty / "onnx" / name
        if a.is_file() and b.is_file() and not os.path.samefile(a, b) and filecmp.cmp(a, b, shallow=False):
            tmp = b.with_suffix(".link")
            os.link(a, tmp)
            os.replace(tmp, b)


def build(cache: Path, vision_block: int, text_layer: int) -> dict[str, dict[str, Any]]:
    root = cache / "qwen3-vl-2b-full"
    root.mkdir(parents=True, exist_ok=True)
    out = {"clean": _build_one(root / "Qwen3-VL-clean", None, None)}
    for graph, fault in FAULTS.items():
        layer = vision_block if graph == "visual" else text_layer
        out[graph] = _build_one(root / f"Qwen3-VL-{fault}-{layer}", fault, layer)
        _link_data(Path(out["clean"]["dir"]), Path(out[graph]["dir"]))
    return out


def _disk(tool: str, model: str, inputs: str, folder: Path) -> tuple[int, int] | None:
    """(bytes the disk check estimates for this tool's run folder, bytes free), or None for a tool it does not
    check (localise-blocks)."""
    from qnn_debug.disk_room import COPIES, disk_need
    from qnn_debug.llm.onnx_export import prepare_model

    if tool not in COPIES:
        return None
    p = prepare_model(model, inputs=inputs)  # the graph and inputs the tool runs
    need = disk_need(folder, tool, p.model, p.shapes, p.inputs or inputs)
    return need.tensors * need.copies, need.free


def run_case(built: dict[str, dict[str, Any]], graph: str, tool: str, out: Path, max_memory: int,
             timeout: float, keep: bool) -> dict[str, Any]:
    """One tool's run in a child; its run folder measured against the disk check's estimate, then removed (a
    full-depth run folder is tens of GB) unless ``keep``."""
    import shutil

    faulty, clean = built[graph], built["clean"]
    layer = int(faulty["fault_layer"])
    name = f"{graph}-{tool}"
    if (out / name).exists():
        shutil.rmtree(out / name)
    disk = _disk(tool, faulty[f"{graph}_onnx"], faulty[f"{graph}_inputs"], out)
    if disk is not None and disk[0] > disk[1]:
        return {"graph": graph, "tool": tool, "right": False,
                "error": f"not run: its folder takes about {disk[0] / 1e9:.1f} GB, {disk[1] / 1e9:.1f} GB free"}
    cmd = [sys.executable, str(HERE / "llm_scale.py"), "--child", "--tool", tool,
           "--model", faulty[f"{graph}_onnx"], "--reference", clean[f"{graph}_onnx"],
           "--inputs", faulty[f"{graph}_inputs"], "--out", str(out / name), "--max-memory", str(max_memory),
           "--timeout", str(timeout)]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with (out / f"{name}.stdout").open("w") as fo, (out / f"{name}.stderr").open("w") as fe, \
            subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
        peaks = watch_peaks(proc)
    from qnn_debug.disk_room import folder_bytes

    written = folder_bytes(out / name)
    if not keep and (out / name).exists():
        shutil.rmtree(out / name)
    if proc.returncode:
        return {"graph": graph, "tool": tool, "right": False, "error": (out / f"{name}.stderr").read_text()[-2000:]}
    doc = json.loads((out / f"{name}.stdout").read_text().strip().splitlines()[-1])
    sim = float(doc["simulator_s"])
    main_rss = peaks.get(proc.pid, (0, ""))[0]
    worker_rss = max((v for pid, (v, _) in peaks.items() if pid != proc.pid), default=0)
    want = EXPECTED_OP[graph].format(n=layer)
    return {"graph": graph, "tool": tool, "fault": FAULTS[graph], "fault_layer": layer,
            "right": doc["block"] == layer and doc["op"] == want, "block": doc["block"], "op": doc["op"],
            "verdict": doc["verdict"], "wall_s": round(doc["wall_s"], 1), "process_s": round(time.perf_counter() - t0, 1),
            "simulator_s": round(sim, 1), "overhead_ratio": round((doc["wall_s"] - sim) / sim, 3) if sim else None,
            "main_rss_gib": round(main_rss / GIB, 2), "worker_rss_gib": round(worker_rss / GIB, 2),
            "within_rss_target": max(main_rss, worker_rss) <= RSS_TARGET, "workers": doc["timings"].get("workers"),
            "disk_gb": round(written / 1e9, 2), "disk_estimate_gb": None if disk is None else round(disk[0] / 1e9, 2),
            "disk_estimate_ratio": None if disk is None or not written else round(disk[0] / written, 2),
            "timings": doc["timings"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", default="visual,llm")
    ap.add_argument("--tools", default="blocks,diagnose,bisect", help="any of blocks, diagnose, bisect")
    ap.add_argument("--vision-fault-block", type=int, default=20)
    ap.add_argument("--text-fault-layer", type=int, default=26)
    ap.add_argument("--max-memory", type=int, default=4 * GIB)
    ap.add_argument("--timeout", type=float, default=7200.0)
    ap.add_argument("--cache", type=Path, default=HERE / ".cache")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-runs", action="store_true", help="keep each run folder (tens of GB at full depth)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    built = build(args.cache, args.vision_fault_block, args.text_fault_layer)
    print(json.dumps({"built_s": round(time.perf_counter() - t0, 1), "vision_seq": built["clean"]["vision_seq"],
                      "prompt_tokens": built["clean"]["prompt_tokens"],
                      "weight_gib": {k: round(v / GIB, 2) for k, v in built["clean"]["weight_bytes"].items()}}),
          file=sys.stderr, flush=True)
    if args.build_only:
        return
    out = args.cache / "runs" / "vl-2b-full"
    cases = []
    for graph in [g for g in args.graphs.split(",") if g]:
        for tool in [t for t in args.tools.split(",") if t]:
            cases.append(run_case(built, graph, tool, out, args.max_memory, args.timeout, args.keep_runs))
            print(json.dumps({k: v for k, v in cases[-1].items() if k != "timings"}), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"cases": cases}, indent=1))
        return
    for c in cases:
        if "error" in c:
            print(f"{c['graph']:<7} {c['tool']:<8} FAILED: {c['error'].splitlines()[-1] if c['error'] else ''}")
            continue
        print(f"{c['graph']:<7} {c['tool']:<8} {'right' if c['right'] else 'WRONG'} block {c['block']} op {c['op']} "
              f"({c['verdict']}); wall {c['wall_s']} s, simulator {c['simulator_s']} s (overhead {c['overhead_ratio']}x), "
              f"peak RSS main {c['main_rss_gib']} / workers {c['worker_rss_gib']} GiB; run folder {c['disk_gb']} GB "
              f"(disk check's estimate {c['disk_estimate_gb']} GB, {c['disk_estimate_ratio']}x)")


if __name__ == "__main__":
    main()
