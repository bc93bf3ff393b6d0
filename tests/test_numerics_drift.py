"""A stretch where the error drifts well below the floor with no op jumping gets its own precision note
(positions, dB); a run at the floor gets none. Targets are .npz files with noise that grows along the graph."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_debug.baseline import run_baseline
from qnn_debug.compare.pipeline import compare_paths
from qnn_debug.examples import deep_conv_net
from qnn_debug.runstore import load_run


def _noisy(base: Path, out: Path, db_at: Callable[[float], float], seed: int = 0) -> Path:
    """The reference with Gaussian noise at SQNR ``db_at(fraction of the way through the graph)`` per tensor."""
    ref = load_run(base / "reference")
    rng = np.random.default_rng(seed)
    last = max(t.position for t in ref.tensors)
    arrays = {}
    for t in ref.tensors:
        a = np.asarray(ref.array(t.name), dtype=np.float64)
        if t.kind == "input" or a.dtype.kind != "f":
            arrays[t.name] = a.astype(np.float32)
            continue
        sigma = np.sqrt(np.mean(a * a) / 10 ** (db_at(max(t.position, 0) / last) / 10))
        arrays[t.name] = (a + rng.normal(0, 1, a.shape) * sigma).astype(np.float32)
    np.savez(out, **arrays)
    return out


@pytest.fixture(scope="module", params=[(8, 16), (12, 8)])
def base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    blocks, ch = request.param
    d = tmp_path_factory.mktemp(f"drift{blocks}")
    onnx.save(deep_conv_net(blocks=blocks, channels=ch, size=16), str(d / "m.onnx"))
    run_baseline(d / "m.onnx", d / "base", mnn_gate=False)
    return d


def test_steady_drift_below_the_floor_is_a_separate_precision_note(base: Path):
    # from 60 dB at the input side down to 30 dB at the output: ~1 dB per op, never a 15 dB jump
    r = compare_paths(base / "base", _noisy(base / "base", base / "drift.npz", lambda f: 62.0 - 32.0 * f))
    drift = r.verdict.evidence.get("drift")
    assert r.verdict.kind == "precision" and r.first_failing is None, r.verdict.summary
    assert drift is not None and drift["drift_db"] >= 15.0
    lo, hi = drift["positions"]
    assert hi - lo >= 10
    assert "Precision note: the error drifts" in r.verdict.summary


def test_no_drift_note_at_the_floor(base: Path):
    r = compare_paths(base / "base", _noisy(base / "base", base / "flat.npz", lambda f: 75.0))
    assert r.verdict.kind == "ok", r.verdict.summary
    assert "drift" not in r.verdict.evidence
