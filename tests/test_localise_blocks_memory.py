"""Peak memory per process of ``localise-blocks`` as users run it (``--inner diagnose``): the simulator job that
builds the head's stage rounds its fp16 floor chunk by chunk (not a graph ONNX Runtime constant-folds into ~six
copies of the weight), and the inner diagnosis of the bad block, marked in chunks, holds one session of the block
however often a chunk's graph fails to build.

Model: the sized Qwen3 builder (``qnn_debug_testkit.sized``) at a small width with half a Qwen3 vocabulary, so its
head is most of the weights, as at 0.6B-1.7B width; peak RSS of every process of the run is read from ``/proc``
(VmHWM) while it runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from qnn_debug_testkit.sized import Qwen3Sizes, build_sized_decoder
from qnn_debug_testkit.tiny_graph import GraphFaults

# a 155 MB head (as at 0.6B-1.7B width, most of the weights) and 29 MB layers whose marked RMSNorm breaks the graph
HEAVY_HEAD = Qwen3Sizes(layers=2, hidden=512, heads=8, kv_heads=4, head_dim=64, intermediate=4096, vocab=75968)


def _peak(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, peak RSS bytes, command line) of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        return int(fields["PPid"]), int(fields["VmHWM"].split()[0]) * 1024, cmd
    except (KeyError, ValueError):
        return None


def _run_watched(args: list[str], cwd: Path) -> tuple[dict[int, tuple[int, str]], str]:
    """Run the CLI with ``args`` in a fresh Python; the peak RSS of it and of every process below it, its stdout."""
    proc = subprocess.Popen([sys.executable, "-m", "qnn_debug", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peaks: dict[int, tuple[int, str]] = {}

    def poll() -> None:
        while proc.poll() is None:
            family = {proc.pid}
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and (st := _peak(int(entry.name))) is not None and st[0] in family:
                    family.add(int(entry.name))
            for pid in family:
                st = _peak(pid)
                if st is not None and st[1] > peaks.get(pid, (0, ""))[0]:
                    peaks[pid] = (st[1], st[2])
            time.sleep(0.1)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    out, err = proc.communicate(timeout=900)
    watcher.join()
    assert proc.returncode == 0, err[-3000:]
    return peaks, out


@pytest.mark.timeout(900)
def test_localise_blocks_as_users_run_it_holds_the_head_and_the_bad_block_about_once(tmp_path: Path) -> None:
    d = build_sized_decoder(tmp_path / "m", HEAVY_HEAD, seq=32, faults={"rotary": GraphFaults(wrong_rotary_layer=1)})
    head = HEAVY_HEAD.vocab * HEAVY_HEAD.hidden * 4
    h, f, hd = HEAVY_HEAD.hidden, HEAVY_HEAD.intermediate, HEAVY_HEAD.head_dim
    layer = 4 * (h * hd * (2 * HEAVY_HEAD.heads + 2 * HEAVY_HEAD.kv_heads) + 3 * h * f)
    out = tmp_path / "out"
    # the command a user types (default --inner diagnose), one simulator worker for the block jobs
    peaks, stdout = _run_watched(["localise-blocks", d.faulty["rotary"], "--reference-model", d.clean, "--inputs",
                                  d.inputs, "--workers", "1", "--out", str(out), "--json"], tmp_path)
    doc = json.loads(stdout)
    assert doc["first_failing"]["op"] == "/layers.1/self_attn/rotary_q/Concat"
    by_kind = {kind: max((rss for rss, cmd in peaks.values() if kind in cmd), default=0)
               for kind in ("parallel.worker", "htp_worker", "sim_probe_worker")}
    shown = {next((w for w in cmd.split() if "qnn_debug" in w), cmd[:40]): rss >> 20 for rss, cmd in peaks.values()}
    assert all(by_kind.values()), shown
    # the block jobs' process: python + ONNX Runtime + the simulator's libraries, the head's session and its fp16
    # floor. Rounded in the graph and constant-folded, the floor held the head about six times (4.96 GiB at 0.6B
    # width); rounded chunk by chunk and handed to the session in place, about once
    assert by_kind["parallel.worker"] < 700 * (1 << 20) + 2 * head, shown
    # the inner diagnosis: the all-tensor graph of the bad block does not build (a marked RMSNorm Div), so it is
    # marked in chunks, split down to the tensor that breaks it; each failed session used to stay alive in its
    # error's traceback while the halves ran (~2.7x the block's weights a level: 2.03 GiB at 0.6B width, 6 at 1.7B).
    # Now the chunked worker holds what the full dump's worker holds: one session of the block
    chunked = json.loads((out / "diagnose-block002_layers1-1" / "htp-sim-chunked" / "run.json").read_text())
    assert chunked["extra"]["unmarkable"], "the chunks never split: this model no longer tests the failed sessions"
    assert by_kind["sim_probe_worker"] < by_kind["htp_worker"] + 8 * layer, shown
