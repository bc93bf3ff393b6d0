"""How much a second simulator session at the same time buys on this machine: the ceiling of every parallel
block run here, measured side by side in one run.

Two graphs, each run on the HTP simulator ``--runs`` times after one warm run:

- ``layer``: one Qwen3 decoder layer at 0.6B width (hidden 1024, 16/8 heads of 128, FFN 3072: RMSNorm, rotary,
  grouped-query attention, SwiGLU; a 260-token vocabulary so the head is negligible), prefill ``--seq`` tokens,
  from ``qnn_debug_testkit.sized`` as the LLM benchmarks build it;
- ``matmuls``: only that layer's matrix work as one chain of MatMuls (1024 x 1024 twice, 1024 x 512 and back,
  1024 x 3072 and back twice).

Each graph runs in ``one`` process alone, then in ``two`` processes at once doing the same runs. Printed per
graph: each process's CPU seconds per wall second (above 1.0 the simulator keeps more than one core busy alone),
and the throughput of ``two`` against ``one`` (2.0 would be linear: a parallel block stage on this machine can
at best take ``1 / throughput`` of its serial time).

Run: ``python bench/sim_concurrency.py [--seq 128] [--runs 6] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN, KV, FFN = 1024, 512, 3072


def build_matmuls(path: Path, seq: int) -> dict[str, np.ndarray]:
    """The layer's matmuls as one chain (each output feeds the next, as in a block); its feeds."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shapes = [("q", HIDDEN, HIDDEN), ("k", HIDDEN, KV), ("k_up", KV, HIDDEN), ("o", HIDDEN, HIDDEN),
              ("gate", HIDDEN, FFN), ("down", FFN, HIDDEN), ("up", HIDDEN, FFN), ("down2", FFN, HIDDEN)]
    inits, nodes, x = [], [], "x"
    for name, rows, cols in shapes:
        w = (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w_{name}"))
        nodes.append(helper.make_node("MatMul", [x, f"w_{name}"], [f"y_{name}"], name=f"/mm_{name}"))
        x = f"y_{name}"
    graph = helper.make_graph(nodes, "layer_matmuls",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, HIDDEN])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return {"x": np.random.default_rng(1).standard_normal((1, seq, HIDDEN)).astype(np.float32)}


def build_layer(folder: Path, seq: int) -> tuple[Path, dict[str, np.ndarray]]:
    """One real 0.6B-width decoder layer (random weights) and its prefill feeds."""
    from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder

    sizes = Qwen3Sizes(hidden=HIDDEN, heads=16, kv_heads=8, head_dim=128, intermediate=FFN, vocab=260, layers=1,
                       rope_theta=1000000.0)
    d = build_sized_decoder(folder, sizes, seq=seq)
    return Path(d.clean), dict(np.load(d.inputs))


def child(model: str, runs: int) -> None:
    from qnn_debug.mnn.soc import DEFAULT_SOC
    from qnn_debug.targets import qnn_ep

    feeds = dict(np.load(Path(model).with_suffix(".feeds.npz")))
    info = qnn_ep.create_session(model, qnn_ep.provider_options(DEFAULT_SOC, None), verbose=False,
                                 external_data_dir=str(Path(model).parent))
    info.session.run(None, feeds)  # warm
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(runs):
        info.session.run(None, feeds)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"wall_s": round(wall, 2), "cpu_per_wall": round(cpu / wall, 2)}))


def spawn(model: Path, runs: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "--child", str(model), "--runs", str(runs)],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def collect(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a simulator child failed (exit {p.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.runs)
    doc: dict[str, Any] = {"seq": args.seq, "runs": args.runs, "graphs": {}}
    with tempfile.TemporaryDirectory(prefix="qnn-debug-simconc-") as tmp:
        layer, layer_feeds = build_layer(Path(tmp) / "layer", args.seq)
        matmuls = Path(tmp) / "matmuls.onnx"
        for name, model, feeds in (("layer", layer, layer_feeds),
                                   ("matmuls", matmuls, build_matmuls(matmuls, args.seq))):
            np.savez(model.with_suffix(".feeds.npz"), **feeds)  # type: ignore[arg-type]
            one = collect([spawn(model, args.runs)])
            two = collect([spawn(model, args.runs), spawn(model, args.runs)])
            # throughput from the timed loops alone (session build excluded, as a long block run amortises it)
            rate_one = args.runs / one[0]["wall_s"]
            rate_two = sum(args.runs / c["wall_s"] for c in two)
            doc["graphs"][name] = {"one": one, "two": two, "throughput_two_vs_one": round(rate_two / rate_one, 2),
                                   "best_block_stage_ratio": round(rate_one / rate_two, 2)}
    doc["load_avg_1min"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    for name, g in doc["graphs"].items():
        one, two = g["one"][0], g["two"]
        print(f"{name}: one session alone {one['wall_s']} s for {args.runs} runs at {one['cpu_per_wall']} CPU s/s; "
              f"two at once {[c['wall_s'] for c in two]} s at {[c['cpu_per_wall'] for c in two]} CPU s/s; "
              f"throughput {g['throughput_two_vs_one']}x (a parallel stage here is at best "
              f"{g['best_block_stage_ratio']}x its serial time)")

if __name__ == "__main__":
    main()
