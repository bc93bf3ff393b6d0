"""Run MNN's ``llm_demo`` on a phone over adb and read the generated text out of its stdout.

``llm_demo CONFIG PROMPT_FILE [MAX_TOKENS]`` (``transformers/llm/engine/demo/llm_demo.cpp``) prints
``config path is …``, load lines, ``prompt file is <file>``, then streams each prompt's answer to stdout,
then a statistics block opened by a line of ``#`` with ``prompt tokens num = N`` / ``decode tokens num = N``.
The demo samples with the config's ``sampler_type`` (llmexport writes ``mixed``); for a comparison the
run must be greedy, so a copy of the config with ``"sampler_type": "greedy"`` is written next to the
original (its relative paths resolve from the config's folder) — the user's files are not changed.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from ..device.adb import Adb, device_path
from ..errors import BadInputError, DeviceError

GREEDY_PREFIX = "qnn-debug-greedy-"
PROMPT_FILE = "qnn-debug-prompt.txt"
IMAGE_FILE = "qnn-debug-image"
# what MNN's runtime prints when it drops an image and goes on with the text alone
_IMAGE_DROPPED = re.compile(r"Omni Can't open image|Can't decode|Reshape error")
_STATS = re.compile(r"^#{10,}\s*$", re.M)


class DemoOutput(BaseModel):
    """What one llm_demo run printed, split into the answer and its statistics."""

    text: str
    prompt_tokens: int | None = None
    decode_tokens: int | None = None
    errors: list[str] = Field(default_factory=list)
    returncode: int = 0


def parse_llm_demo_output(stdout: str, prompt_file: str | None = None) -> DemoOutput:
    """The answer between ``prompt file is …`` and the statistics block; typed error if neither is there."""
    start = None
    for m in re.finditer(r"^prompt file is (.*)$", stdout, re.M):
        if prompt_file is None or m.group(1).strip().endswith(PurePosixPath(prompt_file).name):
            start = m.end() + 1
    if start is None:
        raise DeviceError("llm_demo printed no 'prompt file is' line: it did not reach generation",
                          hint="read its output in the run log (config path, missing files, QNN errors)",
                          details={"tail": stdout[-2000:]})
    stats = _STATS.search(stdout, start)
    body = stdout[start: stats.start() if stats else len(stdout)]
    errors = [ln for ln in stdout.splitlines() if re.search(r"\b(Error|error code|Failed|failed)\b", ln)][:10]
    out = DemoOutput(text=body.strip("\n"), errors=errors)
    if stats:
        tail = stdout[stats.end():]
        if p := re.search(r"prompt tokens num = (\d+)", tail):
            out.prompt_tokens = int(p.group(1))
        if d := re.search(r"decode tokens num = (\d+)", tail):
            out.decode_tokens = int(d.group(1))
    return out


class DeviceTextTarget(BaseModel):
    """Where the model and llm_demo sit on the phone."""

    serial: str | None = None
    model_dir: str = Field(description="device folder holding config_qnn.json (or config.json) and the model")
    config: str = Field(default="config_qnn.json", description="config file name inside model_dir")
    llm_demo: str | None = Field(default=None, description="llm_demo on the device (default: <model_dir>/llm_demo)")
    lib_dir: str | None = Field(default=None, description="folder with libMNN.so / QNN libs (default: model_dir)")
    timeout_s: float = Field(default=600, gt=0, le=7200)
    cpu_config: str = Field(default="config.json", description="the CPU config next to it (for llm_logits_diff)")
    logits_diff_tool: str | None = Field(default=None, description="llm_logits_diff on the device "
                                         "(default: <model_dir>/llm_logits_diff)")


def run_llm_demo(target: DeviceTextTarget, prompt: str, max_new_tokens: int, log: Path, *,
                 image: Path | None = None) -> DemoOutput:
    """Push a one-line prompt file and a greedy copy of the config, run llm_demo, parse its answer.

    With ``image`` the file is pushed beside the model and the prompt's ``<img>image_0</img>`` becomes
    ``<img>device path</img>``, which llm_demo's runtime decodes itself."""
    if not target.model_dir.startswith("/"):
        raise BadInputError(f"device model_dir {target.model_dir!r} is not absolute", hint="e.g. /data/local/tmp/qwen3-npu")
    adb = Adb(target.serial, timeout=target.timeout_s)
    adb.resolve_serial()
    config = device_path(target.model_dir, target.config)
    demo = target.llm_demo or device_path(target.model_dir, "llm_demo")
    present = adb.exists([config, demo])
    missing = [p for p, ok in present.items() if not ok]
    if missing:
        raise DeviceError(f"missing on the device: {', '.join(missing)}",
                          hint="adb push the model folder and llm_demo (built with -DMNN_BUILD_LLM=ON) first")
    raw = adb.shell(["cat", config], merge_stderr=False)
    try:
        cfg = json.loads(raw.output)
    except json.JSONDecodeError:
        raise DeviceError(f"{config} on the device is not valid JSON", hint="re-push the config file") from None
    cfg["sampler_type"] = "greedy"
    greedy = device_path(target.model_dir, GREEDY_PREFIX + PurePosixPath(target.config).name)
    prompt_remote = device_path(target.model_dir, PROMPT_FILE)
    if image is not None:
        image_remote = device_path(target.model_dir, IMAGE_FILE + image.suffix)
        adb.push(image, image_remote)
        prompt = prompt.replace("<img>image_0</img>", f"<img>{image_remote}</img>")
    with tempfile.TemporaryDirectory(prefix="qnn-debug-llm-demo-") as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1), encoding="utf-8")
        (Path(tmp) / "prompt.txt").write_text(" ".join(prompt.split()) + "\n", encoding="utf-8")
        adb.push(Path(tmp) / "config.json", greedy)
        adb.push(Path(tmp) / "prompt.txt", prompt_remote)
    libs = target.lib_dir or target.model_dir
    env = {"LD_LIBRARY_PATH": libs, "ADSP_LIBRARY_PATH": libs}
    result = adb.shell([demo, greedy, prompt_remote, str(max_new_tokens)], cwd=target.model_dir, env=env,
                       timeout=target.timeout_s)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.output, encoding="utf-8", errors="replace")
    out = parse_llm_demo_output(result.output, prompt_remote)
    out.returncode = result.returncode
    dropped = [ln.strip() for ln in result.output.splitlines() if _IMAGE_DROPPED.search(ln)]
    if image is not None and dropped:
        raise DeviceError(f"llm_demo on the phone dropped the image and answered from the text alone; MNN said: "
                          f"{' | '.join(dropped[:3])}", hint="check the image and image_size in the phone's llm_config.json; "
                          f"the full output is in {log}")
    return out
