"""Triage classifies op refusals by their stated code, memory and crash lines and their near misses: memory named in
a failing line, the C++ allocator's "bad allocation", the DSP's own crash report, two Hexagon archs on one line, an
LLM's garbage text, a library said missing before a crash, ops left on the CPU, a failed shape assertion, an error
raised while building, results on the NPU that stay inconsistent, and a question that is no refusal (the classes
of evidence behind the misses of triage tuning round 8).

Every line below was written for this test as a way people or tools say it; none is a corpus line. Each class must
catch its variants and stay silent on the near misses.
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log


def _validate(code: int, op: str = "GridSample") -> str:
    return (f"2025-03-01 10:00:00.1 [W:onnxruntime:, qnn_model_wrapper.cc:240 CreateQnnNode] QNN.backendValidateOpConfig() "
            f"failed for node `{op}_7` of type `{op}` with error code {code}\n")


@pytest.mark.parametrize("code", [4005, 4003, 1000])
def test_an_op_refused_because_nothing_implements_it_is_unsupported(code: int) -> None:
    r = triage_log(text=_validate(code))
    assert r.category == "unsupported_op_not_registered", r.hypotheses
    assert any(f"QNN error {code}" in f for f in r.facts)


def test_the_validation_code_itself_stays_an_op_validation_failure() -> None:
    assert triage_log(text=_validate(3110)).category == "op_validation_failed_3110_0xc26"
    sdk = "<E> QnnBackend_validateOpConfig failed 4005\n"
    assert triage_log(text=sdk).category == "unsupported_op_not_registered"


@pytest.mark.parametrize("line", [
    "[QNN] context creation failed: VTCM allocation failed for graph prefill_0",
    "ERROR: QnnContext_createFromBinary failed, could not map the 1.2 GB weights buffer to the DSP",
    "HTP backend: graph prepare aborted after memory allocation failure (spill-fill buffer of 96MB)",
    "npu delegate: unable to allocate the shared weight buffer on the Hexagon side",
    "LiteRT Qualcomm plugin stops after a TCM mapping error on the single partition",
])
def test_memory_that_cannot_be_allocated_or_mapped_is_memory(line: str) -> None:
    r = triage_log(text=line + "\n")
    assert r.category == "vtcm_or_memory", r.hypotheses


@pytest.mark.parametrize("line", [
    "[QNN] allocated a 300MB weight buffer on the HTP, context created",
    "QNN HTP: memory map of the shared buffer done in 4 ms",
])
def test_memory_named_without_a_failure_stays_silent(line: str) -> None:
    assert triage_log(text=line + "\n").category == "other"


@pytest.mark.parametrize("line", [
    "[E:onnxruntime:, sequential_executor.cc:516 ExecuteKernel] Non-zero status code returned while running Gather "
    "node. Name:'/embed/Gather' Status Message: bad allocation",
    "QNN EP session creation: exception caught: bad allocation",
])
def test_the_allocators_bad_allocation_is_memory(line: str) -> None:
    assert triage_log(text=line + "\n").category == "vtcm_or_memory"


def test_a_bad_allocator_name_is_no_memory_failure() -> None:
    assert triage_log(text="QNN: bad allocator name 'fastest' in the config, using the default\n").category != "vtcm_or_memory"


@pytest.mark.parametrize("report", [
    "adsprpc: Process on aDSP CRASHED!!!! in thread worker\nadsprpc: Fault PC : 0x1f00a0\n",
    "[cdsprpc] ===== Process on the cDSP crashed =====\n",
    "remote_handle_invoke: Crashed Shared Object \"./libQnnHtpV75Skel.so\" load address 0xe0000000\n",
    'fastrpc: Process "/frpc/a12 llama-cli" crashed in thread "htp-worker" for unknown reason\n',
])
def test_the_dsps_own_crash_report_is_a_crash(report: str) -> None:
    r = triage_log(text=report)
    assert r.category == "convert_segfault", r.hypotheses
    assert r.basis == "signature"


def test_a_dsp_process_that_starts_is_no_crash() -> None:
    assert triage_log(text="adsprpc: Process on cDSP started, pid 4411\n").category == "other"


def test_a_dsp_crash_after_a_clear_error_keeps_the_error() -> None:
    log = ("[ERROR] QnnGraph_execute failed with error 6031 for graph decoder_1\n"
           "adsprpc: Process on cDSP CRASHED!!! in thread worker\n")
    assert triage_log(text=log).category == "execute_failed_6000"


def test_a_shouted_banner_is_no_garbled_text_but_repeated_marks_are() -> None:
    banner = "Qwen chat on the NPU\nadsprpc: ######## FAULT REPORTED!!!!!!!! ########\n"
    assert triage_log(text=banner).category != "garbled_llm_output_quantization"
    answer = "Qwen chat on the NPU\nprompt: hello\nresponse: !!!!!!!!!!!!\n"
    assert triage_log(text=answer).category == "garbled_llm_output_quantization"


@pytest.mark.parametrize("line", [
    "ExecuTorch QNN: cannot load the model: the pte was built for v73 but the phone's HTP is v75",
    "libQnnHtp: failed to open skel, looking for hexagon-v79 while only v75 libraries are on the device",
    "QNN context: arch mismatch, binary v69 device v73",
])
def test_two_hexagon_archs_in_a_failing_line_are_a_mismatch(line: str) -> None:
    assert triage_log(text=line + "\n").category == "sdk_version_or_lib_mismatch"


def test_one_arch_or_no_failure_is_no_mismatch() -> None:
    assert triage_log(text="QNN: failed to load libQnnHtpV75Skel.so from /vendor/dsp\n").category == \
        "device_lib_missing_or_load_failure"
    assert triage_log(text="QNN HTP: this SDK supports v73 and v75 targets\n").category == "other"


@pytest.mark.parametrize("text", [
    "Qwen2 on the HTP: prefill gives garbage logits, the generation is garbage from the first token",
    "random answers from the Llama chat app when the NPU backend is on",
    "Gemma on QNN: tokens are mostly junk after the prompt",
])
def test_an_llms_garbage_text_is_garbled_output(text: str) -> None:
    assert triage_log(text=text + "\n").category == "garbled_llm_output_quantization"


def test_garbage_numbers_of_a_model_that_prints_no_text_stay_wrong_results() -> None:
    assert triage_log(text="the QNN delegate gives garbage outputs for the detector\n").category == "wrong_results_accuracy"


def test_a_library_said_missing_before_a_crash_keeps_the_library() -> None:
    text = "安卓 NPU 推理时 app 闪退\n运行时提示缺少 libQnnHtpV73Stub.so 动态库\n"
    assert triage_log(text=text).category == "device_lib_missing_or_load_failure"
    assert triage_log(text="安卓 NPU 推理时 app 闪退\n").category == "convert_segfault"


@pytest.mark.parametrize("text", [
    "with the HTP device selected, ROPE and SOFT_MAX still run on CPU",
    "QNN EP: the LayerNorm nodes are assigned to CPU instead of the NPU",
    "on the Hexagon backend the MUL_MAT_ID ops fall back to CPU",
])
def test_ops_left_on_the_cpu_are_ops_the_backend_does_not_take(text: str) -> None:
    assert triage_log(text=text + "\n").category == "unsupported_op_not_registered"


@pytest.mark.parametrize("text", [
    "the whole QNN model runs on CPU when the HTP cannot be opened",
    "no ops fall back to CPU any more with the HTP backend",
])
def test_a_model_on_the_cpu_or_no_op_on_it_is_no_unsupported_op(text: str) -> None:
    assert triage_log(text=text + "\n").category != "unsupported_op_not_registered"


@pytest.mark.parametrize("line", [
    "[ASSERT] qnn_aot/ReshapeOp.cpp:88 new_shape.numel() != input.numel()",
    "Assertion failed: (weight.dims() == 4) in QnnConv2d.cpp line 51",
    "MNN_ASSERT(inputs[0]->shape().size() == outputs[0]->shape().size()) failed on the QNN backend",
])
def test_a_failed_shape_assertion_is_a_shape_error(line: str) -> None:
    assert triage_log(text=line + "\n").category == "shape_compute_error"


def test_an_assertion_on_anything_but_a_shape_is_no_shape_error() -> None:
    assert triage_log(text="[ASSERT] QnnBackend.cpp:40 handle != nullptr\n").category != "shape_compute_error"


@pytest.mark.parametrize("text", [
    "[ 12%] Building CXX object backends/qnn/op.cpp.o\nRuntimeError: codegen script error while building the QNN "
    "runtime\n",
    "cmake --build out\nOSError: template not found, exception while configuring qnn_executorch\n",
])
def test_an_error_raised_while_building_is_a_build_error(text: str) -> None:
    assert triage_log(text=text).category == "build_error"


def test_an_error_while_building_a_graph_is_no_build_error() -> None:
    text = "[ 99%] Built target runner\nQNN: error while building the graph for the decoder\n"
    assert triage_log(text=text).category != "build_error"


@pytest.mark.parametrize("text", [
    "the results on HTP are still inconsistent with the simulator, max diff 14",
    "SNPE/QNN: outputs on the device were quite different from the fp32 ones",
    "we got error output when the Hexagon delegate is enabled",
])
def test_results_on_the_npu_that_differ_are_wrong_results(text: str) -> None:
    assert triage_log(text=text + "\n").category == "wrong_results_accuracy"


def test_results_on_the_npu_that_agree_are_no_wrong_results() -> None:
    assert triage_log(text="the results on HTP are consistent with CPU now\n").category == "other"
    assert triage_log(text="QNN: got error output code 0 from the delegate\n").category != "wrong_results_accuracy"


@pytest.mark.parametrize("text", [
    "Can we delegate the supported ops to QNN and leave the unsupported ops to the CPU?",
    "Is it possible to run a model with unsupported operators on the HTP partially?",
    "How can I skip the nodes the QNN backend does not support?",
])
def test_a_question_about_unsupported_ops_is_no_refusal(text: str) -> None:
    assert triage_log(text=text + "\n").category == "other"


def test_a_refusal_stated_or_asked_why_is_still_unsupported() -> None:
    assert triage_log(text="QNN GPU: the Resize op is not supported\n").category == "unsupported_op_not_registered"
    assert triage_log(text="Why is the GatherND op not supported by the QNN HTP?\n").category == \
        "unsupported_op_not_registered"
