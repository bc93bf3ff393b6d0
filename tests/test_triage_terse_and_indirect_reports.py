"""Triage classifies failures told indirectly: in a few words, with a chip or board named instead of the backend,
by the dynamic loader's own errors, a register dump, MNN finding no execution for an op, a model-library build step
(the classes of evidence behind the misses of triage tuning round 7).

Every line below was written for this test as a way people or tools say it; none is a corpus line. Each class must
catch its variants and stay silent on the negated or unrelated near misses.
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log

TOLD = {
    "convert_segfault": [
        "MNN 用 Vulkan 后端 createSession 的时候会crash",              # an English word inside Chinese prose
        "QNN 初始化完成后app就crashed了",
        "安卓端加载模型时直接崩溃",                                     # only the model and the phone are named
        "Android 上推理到第二帧就闪退",
        "llama-cli segfault on the QCS6490 board",                     # a chip instead of the backend
        "the runner dies with a segmentation fault on my Rubik Pi",
    ],
    "wrong_results_accuracy": [
        "MNN 推理结果不正确",
        "模型转换后推理输出不准确",
        "安卓上推理结果不正常，和 PC 上差很多",
    ],
    "garbled_llm_output_quantization": [
        "the Phi-3 chat model hallucinates heavily on the NPU",
        "Qwen on QNN keeps hallucinating answers that have nothing to do with the prompt",
        "大模型在 NPU 上出现幻觉，回答和问题无关",
    ],
    "vtcm_or_memory": [
        "the QNN LLM demo was killed by the system halfway through loading",
        "on the phone the NPU runner gets killed by the OOM killer",
        "the HTP demo is reaped by the low memory killer right after the context is created",
        "高通 NPU 上跑 7B 模型，进程被系统杀掉了",
    ],
}


@pytest.mark.parametrize(("category", "text"), [(c, t) for c, ts in TOLD.items() for t in ts])
def test_a_failure_told_in_a_few_words_gets_its_category(category: str, text: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == category, r.hypotheses
    assert r.low_confidence


@pytest.mark.parametrize("text", [
    "MNN 用 Vulkan 后端不会crash，只是很慢",                          # negated in Chinese
    "QNN 上程序没有崩溃，推理也正常",
    "安卓端加载模型很快，没有闪退",
    "MNN 推理结果正确，和 PC 一致",
    "python train.py crashes on my laptop",                          # no QNN, chip or model context
    "the QNN chat model no longer hallucinates after the fix",
    "the QNN runner was not killed by the system this time, it finished",
    "lmkd is configured but the NPU demo keeps running fine",
    "崩溃日志在 crash 目录里",                                       # no inference context at all
    "QNN 上跑大模型会不会崩溃？",                                      # questions and hypotheticals only mention it
    "高通 NPU 推理时是否会被系统杀掉？",
    "Will the QNN app crash if the model is too big?",
    "Would the NPU runner get killed by the system with a 7B model?",
])
def test_negated_unrelated_or_hypothetical_near_misses_stay_other(text: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == "other", r.hypotheses


@pytest.mark.parametrize("line", [
    "dlerror: ELF verification failed: section header for the CRC segment not found in libQnnHtpV73Skel.so",
    "loading libQnnHtp.so: wrong ELF class: ELFCLASS32",
    "dlopen: \"/vendor/lib64/libQnnHtpV75Stub.so\" is 32-bit instead of 64-bit",
    "QNN backend load: not a valid ELF file libQnnSystem.so",
])
def test_the_dynamic_loaders_own_errors_are_a_library_that_does_not_load(line: str) -> None:
    r = triage_log(text=line + "\n")
    assert r.category == "device_lib_missing_or_load_failure", r.hypotheses
    assert r.basis == "signature"


def test_loader_words_without_an_error_or_npu_context_stay_silent() -> None:
    assert triage_log(text="QNN: ELF verification passed for libQnnHtpV75Skel.so\n").category == "other"
    assert triage_log(text="dlerror: wrong ELF class: ELFCLASS32 loading libfoo.so\n").category == "other"


@pytest.mark.parametrize("dump", [
    "run on QCS8550\nx29     0x7ffd3c10\nx30     0x7f81a2c4\nsp      0x7ffd3be0\npc      0x7f81a2d8\n",
    "htp runner on the NPU\nlr      0xffff9f5375f4\nsp      0xffff55c0c380\npc      0xffff9f537608\nfault   0x0\n",
    "QNN tombstone excerpt\n    lr 0000007a1b2c3d4e  sp 0000007ff0a1b2c0  pc 0000007a1b2c3d60  pst 0000000080000000\n",
])
def test_a_register_dump_is_a_crash(dump: str) -> None:
    r = triage_log(text=dump)
    assert r.category == "convert_segfault", r.hypotheses


def test_registers_named_in_prose_or_one_register_are_no_dump() -> None:
    assert triage_log(text="QNN: set sp 0x7ffd3be0 before the call\n").category == "other"
    assert triage_log(text="QNN notes: the sp and pc registers are saved by the stub\n").category == "other"


@pytest.mark.parametrize(("log", "category"), [
    ("./MNNV2Basic.out m.mnn 1 0 0\nERROR: GridSample Op can not execute\nCreate execution error : 101\n",
     "unsupported_op_not_registered"),
    ("MNN session: Create execution error: 7\n", "unsupported_op_not_registered"),
    ("2025-01-02 10:00:00 - ERROR - qnn-model-lib-generator: make: *** [libmodel.so] Error 1\n", "build_error"),
    ("qnn-model-lib-generator failed for target aarch64-android\n", "build_error"),
])
def test_an_op_without_execution_and_a_model_library_build_failure(log: str, category: str) -> None:
    assert triage_log(text=log).category == category


def test_a_model_library_build_that_succeeds_is_no_build_error() -> None:
    log = "INFO - qnn-model-lib-generator: built libmodel.so for aarch64-android\n"
    assert triage_log(text=log).category == "other"
