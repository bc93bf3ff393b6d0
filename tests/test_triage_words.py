"""Failures told only in the reporter's words (English and Chinese), as families, not one log's sentence.

Every line below was written for this test as a way people describe the failure; none is a corpus line. A family
must catch all of them, stay silent on the negated or unrelated variants, and say that its answer rests on words.
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log

WORDS = {
    "convert_segfault": [
        "Whenever I load the QNN model the app crashes immediately.",
        "onnxruntime with the QNN EP: the python process dies while the session is created",
        "The ExecuTorch QNN runner just exits halfway through loading, no message at all",
        "Our Android app force closes when the HTP delegate is enabled",
        "Since switching to the NPU backend the demo keeps stopping on the phone",
        "NPU 推理时程序直接崩溃了",
        "用 QNN 后端一运行 app 就闪退",
        "高通 HTP 上跑模型，跑到一半程序挂了",
        "转换 MNN 模型到 QNN 的时候进程挂掉了",
        "在骁龙 8 Gen 3 上用 npu 推理会奔溃",
    ],
    "wrong_results_accuracy": [
        "the cpu output is correct, but the htp output is totally off",
        "CPU works fine while the QNN delegate misses every box",
        "Running on the NPU the accuracy drops from 76% to 12%",
        "The QNN results differ from CPU by a large margin",
        "With the QNN delegate all outputs are NaN",
        "After HTP conversion the segmentation masks are pure noise",
        "QNN gives wrong predictions for every image",
        "QNN 跑出来精度不对",
        "HTP 推理的结果和 CPU 不一致",
        "CPU 上结果正常，NPU 上输出全是0",
        "量化后放到 htp 上误差很大",
    ],
    "garbled_llm_output_quantization": [
        "Llama on QNN answers with gibberish",
        "the chat response is full of random symbols when it runs on the NPU",
        "Qwen replies with nothing but exclamation marks after quantization",
        "the generated text is unreadable, just special characters",
        "Qwen3 在 NPU 上回答全是乱码",
        "大模型在 HTP 上回答全是问号",
        "llm 在 qnn 上胡言乱语",
    ],
    "vtcm_or_memory": [
        "With the QNN EP the session sits in FinalizeGraph for ten minutes and uses more than 6 GB before it is killed",
        "HTP graph finalize keeps consuming memory until the phone reboots",
        "QNN 图编译的时候内存暴涨，最后被系统杀掉",
        "Loading the 8B model on the NPU, RAM climbs to 15 GB and the process OOMs",
        "the htp runner exhausts all the RAM of a 12 GB phone",
        "跑 QNN 模型的时候手机内存耗尽了",
    ],
    "device_lib_missing_or_load_failure": [
        "after checking the logs the model was entirely running on CPU with the QNN delegate enabled",
        "turns out the NPU was never actually used, the HTP libraries were not in the APK",
        "the QNN runner is unable to communicate with the DSP on my tablet",
        "qnn-net-run could not talk to the cDSP",
        "跑 demo 提示无法与 DSP 通信",
        "日志里看到和 HTP 设备的连接失败",
        "用了 QNN delegate 但是模型全部跑在 CPU 上，没有用到 NPU",
        "算子包没编译，所以缺少\nlibQnnCustomPackage_HTP.so",
    ],
    "sdk_version_or_lib_mismatch": [
        "the README installs onnxruntime-qnn==1.23.0 with onnxruntime-genai==0.7.1 and the NPU sample does not work with them",
    ],
}

# Garbled text shown rather than told: the pasted answer itself is the evidence (a signature, not words).
SHOWN = [
    "prompt: hello\nResponse: kor kor kor kor kor kor kor kor",
    "Answer: 的的的的的的的的的的的的",
    "prompt> hi\nOutput: !!!!!!!!!!!!!!!!",
    "User: what is 2+2?\nAssistant: <unk> <unk> <unk> <unk>",
    "prompt: hi\nresponse: ĠĠĠĠĠĠĠĠ",
    "Answer: <0x0A><0x0A><0xE4><0xBD><0xA0>",
]


@pytest.mark.parametrize(("category", "text"), [(c, t) for c, ts in WORDS.items() for t in ts])
def test_a_failure_told_in_words_gets_its_category_and_says_it_rests_on_words(category: str, text: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == category, r.hypotheses
    assert r.basis == "words" and r.low_confidence


@pytest.mark.parametrize("text", SHOWN)
def test_garbled_text_shown_in_the_log_is_read(text: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == "garbled_llm_output_quantization", r.hypotheses
    assert r.basis == "signature"


@pytest.mark.parametrize("text", [
    "The QNN model no longer crashes after the update, thanks",
    "It does not crash on the NPU anymore",
    "程序没有崩溃，但是 NPU 推理很慢",
    "the CPU output is correct and so is the HTP one",
    "python train.py crashes on my laptop",                          # no QNN/NPU in the text
    "The QNN chat model no longer answers with gibberish after the fix",
    "loss: nan nan nan nan nan nan nan nan (training on the npu cluster)",  # numbers, not a stuck LLM
    "graph finalize on the HTP took 4 s, memory stays at 300 MB",    # a finalize that neither hangs nor eats memory
    "make sure the model is not running on CPU only before profiling the NPU",
    "the QNN backend can communicate with the DSP now, thanks",
])
def test_negated_or_unrelated_words_stay_other(text: str) -> None:
    assert triage_log(text=text + "\n").category == "other"


def test_words_do_not_outweigh_the_logs_own_error() -> None:
    """The reporter says it crashes; the log shows what failed first. The log's line keeps the label."""
    log = ("The app crashes when I enable the QNN delegate\n"
           "E/QnnDsp: graph_prepare.cc:210:ERROR:could not create op: q::Conv2d\n")
    assert triage_log(text=log).category == "finalize_failed_1002"


def test_the_same_statement_said_twice_is_one_vote() -> None:
    one = triage_log(text="QNN 跑出来精度不对\n")
    two = triage_log(text="QNN 跑出来精度不对，结果和 CPU 不一致，精度下降很多\n")
    assert one.hypotheses[0].score == two.hypotheses[0].score


def test_words_restating_a_crash_line_add_nothing() -> None:
    bare = triage_log(text="starting the QNN runner\nSegmentation fault (core dumped)\n")
    told = triage_log(text="the QNN runner crashes\nstarting the QNN runner\nSegmentation fault (core dumped)\n")
    assert bare.category == told.category == "convert_segfault"
    assert bare.hypotheses[0].score == told.hypotheses[0].score


@pytest.mark.parametrize(("text", "category"), [
    ("手机上的 QNN 库和转模型时的 SDK 版本不匹配，怎么办", "sdk_version_or_lib_mismatch"),
    ("好像是混用了两个版本的 libQnnHtp", "sdk_version_or_lib_mismatch"),
    ("小米 14 上 NPU 初始化失败，只能跑 CPU", "device_lib_missing_or_load_failure"),
    ("无法打开 DSP，高通的 demo 也跑不起来", "device_lib_missing_or_load_failure"),
])
def test_chinese_words_for_versions_and_the_device(text: str, category: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == category, r.hypotheses
    assert r.basis == "words"


def test_a_run_of_one_character_in_a_dump_is_not_a_stuck_llm() -> None:
    """Base64 of zeros ('AAAA...') or a repeated word glued together by a tool is not an LLM repeating a token."""
    assert triage_log(text="prompt: x\nweights: " + "A" * 200 + "==\n").category == "other"
    assert triage_log(text="llm_demo prompt.txt\n" + "ab" * 3 + " QNN ready\n").category == "other"


@pytest.mark.parametrize("text", [
    "[Bug] QNN backend: inference result wrong on Snapdragon 8 Gen 3",
    "HTP delegate gives incorrect detections for yolov8",
    "Wrong output values when running the int8 model on the NPU",
])
def test_titles_that_say_the_numbers_are_wrong(text: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == "wrong_results_accuracy", r.hypotheses


@pytest.mark.parametrize(("text", "category"), [
    ("the QNN runner exits after printing the results", "other"),          # a program that ends is no crash
    ("the QNN runner exits silently after loading the context", "convert_segfault"),
    ("qnn-net-run terminated with code -11 right after graph prepare", "convert_segfault"),
])
def test_a_program_that_ends_is_a_crash_only_when_it_ends_abnormally(text: str, category: str) -> None:
    assert triage_log(text=text + "\n").category == category


@pytest.mark.parametrize("text", [
    "Quantized on the HTP the outputs drift from float as the network gets deeper:\n"
    "| blocks | max abs diff | cosine |\n|---|---|---|\n| 2 | 0.004 | 0.999 |\n| 16 | 0.41 | 0.92 |\n",
    "The difference between the QNN outputs and the float reference outputs keeps growing with every layer",
])
def test_an_error_table_or_a_difference_told_in_words_is_wrong_numbers(text: str) -> None:
    r = triage_log(text=text)
    assert r.category == "wrong_results_accuracy", r.hypotheses
    assert r.basis == "words"


@pytest.mark.parametrize("text", [
    "the HTP side of the op package is missing, the build folder was never created for QNN",
    "could not find libQnnMyOpsPackage.so when the QNN backend registers custom ops",
    "QNN 自定义算子包找不到，没有编译",
])
def test_a_missing_op_package_told_in_prose_is_a_library_that_does_not_load(text: str) -> None:
    """Words or the structure of the sentence (``missing``, ``not find``) may read it: either way the category."""
    assert triage_log(text=text + "\n").category == "device_lib_missing_or_load_failure"
