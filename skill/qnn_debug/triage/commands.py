"""Command lines in a log: which MNN export/convert tool ran, with which flags, and what that implies.

Why: users paste the command with the error, and the flags often are the diagnosis (activation quant
without ``--smooth``/``--omni``, ``--max_history_token`` > 0 moving KV Attention into the NPU graph,
``--dsp_arch`` without its ``v``). Facts come from MNN's sources at 4d40bdb; each says where.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, Field

# Lines that MNN's export tools print while running (their presence means "an export was running").
STEP_MARKERS = ("Step1: Make IO", "Step2: Seperate Model", "Step3: Compile to QNN", "Convert for QNN, QualComn's NPU",
                "[Temp Product]: Qnn temp product generate at")
END_MARKERS = ("End", "Write config to npu_postreat.json", "[All passed]", "Converted Success!", "TEST_SUCCESS",
               "Successfully generate", "Traceback (most recent call last)")

_CMD = re.compile(r"(?P<tool>llmexport\.py|generate_llm_qnn\.py|compilefornpu|MNN2QNNModel|npu_convert\.py|generateIO)\b(?P<args>(?:[^\n\\]|\\(?!\n))*(?:\\\n(?:[^\n\\]|\\(?!\n))*)*)")


class CommandLine(BaseModel):
    tool: str
    flags: dict[str, str] = Field(default_factory=dict, description="--flag -> value ('' for a bare switch)")
    line: int


def find_commands(text: str, base_line: int = 0) -> list[CommandLine]:
    """Tool invocations in ``text`` (shell continuation lines joined), with their ``--flags``."""
    out: list[CommandLine] = []
    for m in _CMD.finditer(text):
        args = m.group("args").replace("\\\n", " ")
        try:
            words = shlex.split(args, posix=True)
        except ValueError:
            words = args.split()
        flags: dict[str, str] = {}
        i = 0
        while i < len(words):
            w = words[i]
            if w.startswith("--"):
                key, eq, value = w.partition("=")
                if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                    value = words[i + 1]
                    i += 1
                flags[key] = value
            i += 1
        out.append(CommandLine(tool=m.group("tool"), flags=flags, line=base_line + text.count("\n", 0, m.start()) + 1))
    return out


def command_facts(commands: list[CommandLine]) -> list[str]:
    """What the flags imply, in words, each with its MNN source."""
    facts: list[str] = []
    for c in commands:
        f = c.flags
        if c.tool == "llmexport.py":
            act = "--act_bit" in f and f["--act_bit"] not in ("", "32")
            if act and "--smooth" not in f and "--omni" not in f:
                facts.append(f"llmexport.py line {c.line}: --act_bit={f['--act_bit']} without --smooth or --omni quantizes no "
                             "activation (llmexport.py:764-769)")
            if "--smooth" in f and "--omni" in f:
                facts.append(f"llmexport.py line {c.line}: --smooth and --omni exclude each other (llmexport.py:36-37, 1025-1027)")
            if "--sym" in f and "--act_sym" not in f and act:
                facts.append(f"llmexport.py line {c.line}: --sym makes the weights symmetric; activations stay asymmetric unless "
                             "--act_sym is given (llmexport.py:1034, 1052)")
            if "--generate_for_npu" not in f:
                facts.append(f"llmexport.py line {c.line}: no --generate_for_npu: the export is not prepared for the QNN LLM path "
                             "(transformer_c4 stays on, llmexport.py:1067-1068)")
        if c.tool == "generate_llm_qnn.py":
            arch = f.get("--dsp_arch", "")
            if arch and not arch.lower().startswith("v"):
                facts.append(f"generate_llm_qnn.py line {c.line}: --dsp_arch {arch} lacks the 'v' (pass e.g. v75; it goes verbatim "
                             "into the HTP config)")
            mht = f.get("--max_history_token", "0")
            if mht.isdigit() and int(mht) > 0:
                facts.append(f"generate_llm_qnn.py line {c.line}: --max_history_token {mht} > 0 sets KVCACHE_SIZE_LIMIT, which makes "
                             "every op NPU-eligible (KV-cache Attention, LinearAttention) (compilefornpu.cpp:86-89); the #4716 fix "
                             "runs with 0")
            if "--chunk_size" in f:
                facts.append(f"generate_llm_qnn.py line {c.line}: --chunk_size {f['--chunk_size']} changes each graph's size, not "
                             "their number (always two shape configs [chunk_size, 1], generate_llm_qnn.py:76-91)")
    return list(dict.fromkeys(facts))


def ended_cleanly(tail: list[str]) -> bool:
    """True when the last lines hold an end marker of an export tool (or a Python traceback, which is an ending)."""
    return any(any(marker in line for marker in END_MARKERS) for line in tail)
