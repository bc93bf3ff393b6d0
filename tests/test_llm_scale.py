"""Block localisation, diagnose (chunked marking) and bisect at 0.6B width (28 layers, 2.2 GiB of fp32 weights in
external data): right block and op for a broken rotary near the end and an fp16 overflow from a residual spike
early, within the time and memory targets. Marked ``scale``: tens of minutes of simulator time and GBs of disk,
so not part of ``make test``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.scale
@pytest.mark.timeout(4 * 3600)
def test_localise_blocks_diagnose_and_bisect_at_0_6b_width_find_both_faults_within_the_targets() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "llm_scale.py"), "--width", "0.6b", "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    cases = {(c["tool"], c["fault"]): c for c in report["cases"]}
    assert set(cases) == {(t, f) for t in ("blocks", "diagnose", "bisect") for f in ("rotary", "spike")}
    for tool in ("blocks", "diagnose", "bisect"):
        rotary, spike = cases[(tool, "rotary")], cases[(tool, "spike")]
        assert rotary["block"] == 26 and rotary["op"] == "/layers.26/self_attn/rotary_q/Concat", rotary
        assert spike["right"], spike  # the fp16 range at /layers.2/input_layernorm/Pow
    for case in report["cases"]:
        assert case["overhead_ratio"] <= 0.5, case
        assert max(case["main_rss_gib"], case["worker_rss_gib"]) <= 4.0, case
