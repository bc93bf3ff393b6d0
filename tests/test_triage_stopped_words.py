"""An export log that stops without a crash line stays incomplete whatever the reporter says about it.

The reporter's "段错误", "segfaults" or "crashed" say the run crashed, not that the log shows where: the stdbuf/gdb
re-run must still be asked for, and the answer must say it rests on their words, not on a signature.
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log

STOPPED_LOGS = [
    "./compilefornpu llm.mnn qnn.json\nStep2: Seperate Model\nConvert for QNN, QualComn's NPU\n",
    ("python npu/generate_llm_qnn.py --model qwen --soc_id 57 --dsp_arch v75\nStep1: Make IO\nCost:  2.1  s\n"
     "Step2: Seperate Model\nConvert for QNN, QualComn's NPU\ngCacheDir.c_str()=s qnn in main, 1497 \n"),
]
WORDS = [
    "调用 npu/generate_llm_qnn.py 时 Step 2 内部调用 compilefornpu 时发生段错误\n",
    "compilefornpu segfaults for me every time at step 2\n",
    "It always crashed during Step2, any idea?\n",
    "导出到第二步就段错误了，日志如下：\n",
]


@pytest.mark.parametrize("log", STOPPED_LOGS)
@pytest.mark.parametrize("words", WORDS)
def test_the_reporters_crash_words_do_not_complete_a_stopped_log(log: str, words: str) -> None:
    for text in (words + log, log + words):
        r = triage_log(text=text)
        assert r.category == "convert_segfault", r.hypotheses
        assert r.basis == "words", (r.basis, r.evidence)
        assert any("stdbuf -o0" in w for w in r.warnings), r.warnings
        assert "stopped without a crash line" in r.title
        assert r.low_confidence and r.low_confidence_reason and "stdbuf -o0" in r.low_confidence_reason


@pytest.mark.parametrize("log", STOPPED_LOGS)
@pytest.mark.parametrize("crash_line", [
    "Segmentation fault (core dumped)\n",
    "段错误 (核心已转储)\n",
    "bash: line 1: 4242 Segmentation fault      (core dumped) ./compilefornpu llm.mnn qnn.json\n",
    "zsh: segmentation fault  python npu/generate_llm_qnn.py --model qwen\n",
])
def test_a_printed_crash_line_is_a_signature_and_completes_the_log(log: str, crash_line: str) -> None:
    r = triage_log(text="导出到第二步就段错误了\n" + log + crash_line)
    assert r.category == "convert_segfault" and r.basis == "signature"
    assert not any("stdbuf" in w for w in r.warnings) and "stopped without" not in r.title
