"""Builds the tiny Qwen3-shaped llmexport folders the LLM tests share (no tests here).

Two differently sized and seeded models, each clean and with every injected fault, so a check is never
tuned to one model. Built once per test session into pytest's temporary directory.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from qnn_debug_testkit.tiny import FAULTS, TinyExportRequest, build_tiny_export
from qnn_debug_testkit.tiny_graph import TinyQwen3Config

MODELS = {
    "a": (TinyQwen3Config(), None),
    "b": (TinyQwen3Config(layers=3, hidden=192, heads=6, kv_heads=2, intermediate=384, vocab=400, seed=5), 0),
    "c": (TinyQwen3Config(layers=8, hidden=256, heads=8, kv_heads=4, intermediate=512, vocab=512, seed=9), 5),
}


STATIC_FAULTS = ("unregistered_op", "index_quant", "mul_encoding")


def cases() -> list[tuple[str, str]]:
    """Every fault on models a and b; the 8-layer model c only clean and with the faults found statically."""
    return [(key, fault or "clean") for key in MODELS
            for fault in ((None, *FAULTS) if key != "c" else (None, *STATIC_FAULTS))]


def build_all(root: Path) -> dict[tuple[str, str], Path]:
    """(model, fault or "clean") → export folder; the clean ones carry smooth-quant style encodings too."""
    out: dict[tuple[str, str], Path] = {}
    for key, name in cases():
        cfg, layer = MODELS[key]
        fault = None if name == "clean" else name
        req = TinyExportRequest(config=cfg, fault=fault, fault_layer=layer, act_quant=True)  # type: ignore[arg-type]
        out[(key, name)] = Path(build_tiny_export(root / key / name, req).dir)
    return out


def write_constants(path: Path, arrays: dict[str, tuple[list[int], str]]) -> None:
    """A generateIO-style ``input.mnn`` (MNN ``Variable::save``) written by the MNN wheel in a child process."""
    lines = ["import MNN.expr as F", "vs = []"]
    for name, (shape, dtype) in arrays.items():
        kind = "F.float" if dtype == "float" else "F.int"
        n = 1
        for d in shape:
            n *= d
        lines.append(f"v = F.const([0] * {n}, {shape}, F.NCHW, {kind}); v.name = {name!r}; vs.append(v)")
    lines.append(f"F.save(vs, {str(path)!r})")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", "\n".join(lines)], check=True, capture_output=True, timeout=120)
