"""Run MNN's ``llm_logits_diff`` on a phone: CPU and QNN configs teacher-forced side by side, per-step logits.

``llm_logits_diff configA configB prompt.txt [max_tokens]`` (``transformers/llm/engine/demo/llm_logits_diff.cpp``
in recent MNN) loads both configs, feeds A's argmax to both at every step and prints one row per step:
``step | tokA tokB agree | marginA marginB | maxAbsDiff meanAbsDiff | text``, then
``summary: argmax disagreements=N, first at step S, worst maxAbsDiff=X`` and
``distribution: mean KL(A||B)=…, teacher-forced mean NLL A=… B=…``. With A = the folder's CPU
``config.json`` and B = ``config_qnn.json`` this is the on-device logits comparison llm_demo cannot give.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from ..device.adb import Adb, device_path
from ..errors import BadInputError, DeviceError
from .llm_demo import PROMPT_FILE

_ROW = re.compile(r"^\s*(\d+) \|\s+(-?\d+)\s+(-?\d+) (  ==|DIFF) \|\s+(\S+)\s+(\S+) \|\s+(\S+)\s+(\S+) \| ?(.*)$")
_SUMMARY = re.compile(r"summary: argmax disagreements=(\d+), first at step (-?\d+), worst maxAbsDiff=(\S+)")
_DIST = re.compile(r"mean KL\(A\|\|B\)=(\S+), teacher-forced mean NLL A=(\S+) B=(\S+)")


class DiffStep(BaseModel):
    step: int
    token_a: int
    token_b: int
    agree: bool
    margin_a: float
    margin_b: float
    max_abs_diff: float
    mean_abs_diff: float
    text: str


class DeviceLogitsDiff(BaseModel):
    """The phone's own teacher-forced comparison of two configs (A drives the tokens)."""

    config_a: str
    config_b: str
    steps: list[DiffStep] = Field(default_factory=list)
    disagreements: int = 0
    first_disagreement: int | None = None
    worst_max_abs_diff: float | None = None
    mean_kl: float | None = None
    nll_a: float | None = None
    nll_b: float | None = None
    errors: list[str] = Field(default_factory=list)


def parse_logits_diff(stdout: str, config_a: str, config_b: str) -> DeviceLogitsDiff:
    """Rows and summary of one llm_logits_diff run; DeviceError when it printed no step at all."""
    out = DeviceLogitsDiff(config_a=config_a, config_b=config_b)
    for line in stdout.splitlines():
        if m := _ROW.match(line):
            try:
                out.steps.append(DiffStep(step=int(m.group(1)), token_a=int(m.group(2)), token_b=int(m.group(3)),
                                          agree=m.group(4) == "  ==", margin_a=float(m.group(5)), margin_b=float(m.group(6)),
                                          max_abs_diff=float(m.group(7)), mean_abs_diff=float(m.group(8)), text=m.group(9)))
            except ValueError:
                continue
        elif s := _SUMMARY.search(line):
            out.disagreements = int(s.group(1))
            out.first_disagreement = int(s.group(2)) if int(s.group(2)) >= 0 else None
            out.worst_max_abs_diff = float(s.group(3))
        elif d := _DIST.search(line):
            out.mean_kl, out.nll_a, out.nll_b = (float(d.group(i)) for i in (1, 2, 3))
        elif re.search(r"load failed|returned null|invalid vocab|Failed to open", line):
            out.errors.append(line.strip())
    if not out.steps:
        raise DeviceError("llm_logits_diff printed no step", hint="read its output in the run log (load failed? missing files?)",
                          details={"errors": out.errors, "tail": stdout[-2000:]})
    return out


def run_logits_diff(serial: str | None, model_dir: str, config_a: str, config_b: str, prompt: str, max_new_tokens: int,
                    tool: str | None, lib_dir: str | None, timeout_s: float, log: Path) -> DeviceLogitsDiff:
    """Push the prompt, run llm_logits_diff A B on the phone, parse it."""
    if not model_dir.startswith("/"):
        raise BadInputError(f"device model_dir {model_dir!r} is not absolute", hint="e.g. /data/local/tmp/qwen3-npu")
    adb = Adb(serial, timeout=timeout_s)
    adb.resolve_serial()
    a, b = device_path(model_dir, config_a), device_path(model_dir, config_b)
    exe = tool or device_path(model_dir, "llm_logits_diff")
    missing = [p for p, ok in adb.exists([a, b, exe]).items() if not ok]
    if missing:
        raise DeviceError(f"missing on the device: {', '.join(missing)}",
                          hint="adb push both configs and llm_logits_diff (an MNN build with -DMNN_BUILD_LLM=ON) first")
    remote_prompt = device_path(model_dir, PROMPT_FILE)
    with tempfile.TemporaryDirectory(prefix="qnn-debug-logits-diff-") as tmp:
        (Path(tmp) / "prompt.txt").write_text(prompt + "\n", encoding="utf-8")
        adb.push(Path(tmp) / "prompt.txt", remote_prompt)
    libs = lib_dir or model_dir
    result = adb.shell([exe, a, b, remote_prompt, str(max_new_tokens)], cwd=model_dir,
                       env={"LD_LIBRARY_PATH": libs, "ADSP_LIBRARY_PATH": libs}, timeout=timeout_s)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.output, encoding="utf-8", errors="replace")
    return parse_logits_diff(result.output, a, b)
