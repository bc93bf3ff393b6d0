"""Message families, not single strings: each signature family must catch wordings it was not written from.

The lines below are new variants (other runtimes' wording, other numbers, Chinese prose); none of them is a
corpus line, so a signature that only memorised its example fails here.
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log

FAMILIES = [
    ("QnnGraph_execute failed with error 6033 (graph 2)", "execute_failed_6000"),
    ("E runner: graph_execute returned error 1100 on context 3", "execute_failed_6000"),
    ("W: QNN_COMMON_ERROR_SYSTEM_COMMUNICATION during inference, handles must be recreated", "execute_failed_6000"),
    ("Non-zero status code returned while running QNN_42_7 node. Name:'QNNExecutionProvider_QNN_42_7_0'",
     "execute_failed_6000"),
    ("graph build: status = 6021", "finalize_failed_1002"),
    ("fastrpc: remote_handle64_open failed for libQnnHtpV79Skel.so, error 0x8000040d", "device_lib_missing_or_load_failure"),
    ("HTP: unable to open DSP session on cdsp", "device_lib_missing_or_load_failure"),
    ("模型转换时 validateOpConfig 报 3110，Conv 校验没有通过", "op_validation_failed_3110_0xc26"),
    ("[E] node /conv1: op validator (FP16) failed for QNN HTP", "op_validation_failed_3110_0xc26"),
    ("手机上跑 Qwen3 的时候内存不足，进程直接退出", "vtcm_or_memory"),
    ("运行时提示找不到 libQnnSystem.so", "device_lib_missing_or_load_failure"),
    ("转换到 NPU 时报 QNN 不支持这个算子 GridSample", "unsupported_op_not_registered"),
]


@pytest.mark.parametrize(("line", "category"), FAMILIES)
def test_family_variant_is_recognised(line: str, category: str) -> None:
    assert triage_log(text=line + "\n").category == category


def test_tcm_migration_failure_alone_is_a_prepare_failure_not_capacity() -> None:
    log = ("graph_prepare.cc:2879:ERROR:Graph prepare TCM Migration action failed\n"
           "<E> Failed to finalize graph (id: 1) with err 1002\n")
    assert triage_log(text=log).category == "finalize_failed_1002"
    with_size = "ERROR: requires 0x2400000 bytes of TCM, which is greater than the TCM size of 0x800000!\n" + log
    assert triage_log(text=with_size).category == "vtcm_or_memory"


def test_a_1100_warning_outside_execution_is_not_an_execute_failure() -> None:
    r = triage_log(text="[WARNING] <W> Failed to create new env handle with error 1100\n")
    assert r.category != "execute_failed_6000"


def test_an_error_number_counts_only_with_its_context_words() -> None:
    """Code-first signatures check the words before the number ('before'), so a bare number is not a QNN error."""
    assert triage_log(text="QnnDevice_create failed, error: 14001\n").category == "device_lib_missing_or_load_failure"
    assert triage_log(text="copied 14001 bytes to the device\n").category == "other"
    assert triage_log(text="status 114001 reached\n").category == "other"


@pytest.mark.parametrize("optype", ["305", "306", "307", "308"])
def test_llm_c4_fused_op_not_registered_in_a_crashing_export_is_the_map_miss(optype: str) -> None:
    """An llmexport C4 fusion without a QNN creator, then a crash in compilefornpu: re-export, not add an op."""
    log = (f"./compilefornpu llm.mnn qnn.json\nMNN_QNN: Not registered type {optype}, /layers.0/self_attn/x.\n"
           "段错误 (核心已转储)\n")
    result = triage_log(text=log)
    assert result.category == "convert_segfault", result.hypotheses
    assert any(step.tool == "check_llm_export" for step in result.next_steps)


def test_other_op_not_registered_before_a_crash_stays_an_unsupported_op() -> None:
    log = ("MNN2QNNModel $QNN_SDK_ROOT 39 68 det.mnn ./qnn\nMNN_QNN: Not registered type 17, /up/ConvTranspose_output_0.\n"
           "Segmentation fault (core dumped)\n")
    assert triage_log(text=log).category == "unsupported_op_not_registered"
