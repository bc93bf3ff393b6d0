"""Logs of runtimes nobody here has seen: other prefixes, Windows, logcat, JSON, Python wrappers, other spellings.

Every line was written for this test (shapes such logs take, not lines copied from a report); none is a corpus line.
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log

FORMATS = [
    # access to the DSP refused
    ("E/FastRPC( 4120): open_dev: cannot open /dev/fastrpc-cdsp: Permission denied", "device_lib_missing_or_load_failure"),
    ("adsprpc: no access to the cdsp device node for domain 3, falling back", "device_lib_missing_or_load_failure"),
    ("avc: denied { read write } for name=\"fastrpc-cdsp\" dev=\"tmpfs\" scontext=u:r:untrusted_app", "device_lib_missing_or_load_failure"),
    ("DspClient: openSession returned EACCES", "device_lib_missing_or_load_failure"),
    ("应用调用 HTP 时报 DSP 权限不足", "device_lib_missing_or_load_failure"),
    # status numbers as JSON fields or key=value
    ('{"level": "error", "component": "qnn", "msg": "graph execute", "error_code": 6031}', "execute_failed_6000"),
    ("qnn_ctx: restore done, errorCode=5005", "sdk_version_or_lib_mismatch"),
    # status enums without their QNN_ prefix (a binding's own spelling)
    ("RuntimeError: QnnStatus.GRAPH_ERROR_FINALIZE_FAILED while preparing decoder", "finalize_failed_1002"),
    ("status: CONTEXT_ERROR_BINARY_VERSION", "sdk_version_or_lib_mismatch"),
    # Windows on Snapdragon: DLLs and access violations
    ("LoadLibraryExW failed for QnnHtp.dll: error 126", "device_lib_missing_or_load_failure"),
    ("onnxruntime_pybind11_state: The specified module could not be found. (QnnSystem.dll)", "device_lib_missing_or_load_failure"),
    ("Loading the QNN EP...\nProcess finished with exit code -1073741819 (0xC0000005)", "convert_segfault"),
    ("qnn-net-run.exe: Exception thrown at 0x00007FF: Access violation reading location 0x0000000000000010.",
     "convert_segfault"),
    # Python's view of a crashed child
    ("subprocess.CalledProcessError: Command '['qnn-context-binary-generator', '--backend', 'libQnnHtp.so']' died with "
     "<Signals.SIGSEGV: 11>.", "convert_segfault"),
    ("Fatal Python error: Segmentation fault\n  File \"executorch/backends/qualcomm/qnn_preprocess.py\", line 80", "convert_segfault"),
    # builds: compiler and linker diagnostics, missing custom-op libraries
    ("src/qnn/htp_ops.cpp:41:17: error: 'Qnn_OpConfigV2_t' was not declared in this scope", "build_error"),
    ("qnn_backend.obj : error LNK2019: unresolved external symbol QnnInterface_getProviders", "build_error"),
    ("C:\\src\\ggml-hexagon.cpp(120,5): error C2065: 'HAP_power_request': undeclared identifier", "build_error"),
    ("RuntimeError: No such operator qaisw::fused_rms_norm (QNN export)", "build_error"),
    ("在 Windows 上编译 MNN 的 QNN 后端编译失败", "build_error"),
]


@pytest.mark.parametrize(("log", "category"), FORMATS)
def test_a_new_runtimes_format_is_read(log: str, category: str) -> None:
    r = triage_log(text=log + "\n")
    assert r.category == category, r.hypotheses


@pytest.mark.parametrize("log", [
    "Before this error, every QNN library was loaded successfully and the HTP backend was created without issues.",
    "cp model.bin /data/local/tmp: Permission denied",          # a file, not the DSP
    "building the QNN graph for decoder_0 (compile 12 ops)",     # a graph being built, not a build failing
    '{"level": "info", "msg": "frames", "count": 6031}',          # a number that is no status
])
def test_near_misses_of_new_formats_stay_other(log: str) -> None:
    assert triage_log(text=log + "\n").category == "other"


def test_a_graph_compilation_failure_is_not_a_build_error() -> None:
    r = triage_log(text="QNN graph compilation failed: could not create op q::LayerNorm\n")
    assert r.category == "finalize_failed_1002"


@pytest.mark.parametrize(("log", "category"), [
    ("INFO: Created TensorFlow Lite delegate for QNN.\nERROR: Node number 57 (TfLiteQnnDelegate) failed to prepare.",
     "finalize_failed_1002"),
    ("ERROR: Node number 0 (QnnDelegateKernel) failed to invoke.", "execute_failed_6000"),
])
def test_tflite_delegate_node_failures(log: str, category: str) -> None:
    assert triage_log(text=log + "\n").category == category


def test_words_count_for_quantized_models_without_a_qnn_name() -> None:
    """AIMET / quantization reports may never name QNN: the quantization context is enough for the words."""
    r = triage_log(text="After AIMET QuantSim the int8 model's accuracy drops from 71% to 3%\n")
    assert r.category == "wrong_results_accuracy" and r.basis == "words"


# A QNN API call with what it returned; sizes that do not fit; binaries built for another target; metrics judged.
MORE = [
    ("genie-t2t-run: [QNN] QnnGraph_finalize returned 1002 for graph prompt_ar128_cl4096_1_of_4", "finalize_failed_1002"),
    ("qnn: QnnBackend_create failed with 4001", "device_lib_missing_or_load_failure"),
    ("runner: QnnContext_createFromBinary -> status 5000", "sdk_version_or_lib_mismatch"),
    ("QnnDsp <E> Requested VTCM size 8 MB exceeds the available 4 MB", "vtcm_or_memory"),
    ("htp: not enough memory to load the weights of graph 3", "vtcm_or_memory"),
    ("java.lang.OutOfMemoryError: Failed to allocate a 536870912 byte allocation (QNN model load)", "vtcm_or_memory"),
    ("lowmemorykiller: Kill 'com.example.llm' (12345), adj 0, to free 1900000kB", "vtcm_or_memory"),
    ("[ERROR] QnnDsp <E> Context binary was generated with a newer QNN version (2.28) than the runtime (2.22)",
     "sdk_version_or_lib_mismatch"),
    ("The context binary was compiled for soc model 57 but the device reports 69", "sdk_version_or_lib_mismatch"),
    ("QNN HTP output SQNR vs CPU is only 3 dB", "wrong_results_accuracy"),
    ("The cosine similarity between HTP and CPU outputs is 0.12", "wrong_results_accuracy"),
    ("max abs diff between QNN and onnxruntime CPU output: 45.3", "wrong_results_accuracy"),
    ("ERROR: No matching distribution found for qai-hub-models[llama]", "build_error"),
    ("Response: ,,,,,,,,,,,,,,,,,,,,,,,,,", "garbled_llm_output_quantization"),
]


@pytest.mark.parametrize(("log", "category"), MORE)
def test_calls_sizes_targets_and_metrics_are_read(log: str, category: str) -> None:
    r = triage_log(text=log + "\n")
    assert r.category == category, r.hypotheses


@pytest.mark.parametrize("log", [
    "QNN HTP: cosine similarity vs CPU 0.9993, SQNR 41.2 dB",        # a healthy comparison
    "QnnGraph_finalize returned 0 for graph decoder_0",              # success status
    "QNN: VTCM size set to 8 MB for graph decoder_0",                # a setting, nothing exceeded
    "model compiled for soc model 57 (SM8650), running on SM8650",   # same target, no 'but'
])
def test_healthy_calls_sizes_targets_and_metrics_stay_other(log: str) -> None:
    assert triage_log(text=log + "\n").category == "other"


@pytest.mark.parametrize(("log", "category"), [
    ("./MNNConvert -f ONNX --modelFile m.onnx --MNNModel m.mnn\nThe Op: GridSample, type: GridSample not support, please check",
     "unsupported_op_not_registered"),
    ("MNN OpenCL: after quantization the detection results are all wrong compared to CPU", "wrong_results_accuracy"),
    ("aimet_torch: QuantSim export to QNN fails with KeyError: 'aten::scaled_dot_product_attention'",
     "unsupported_op_not_registered"),
    ("E 00:00:01.234 executorch:QnnManager.cpp:412] Fail to configure Qnn device", "device_lib_missing_or_load_failure"),
    ("[ERROR] [Qnn ExecuTorch]: QnnDsp <E> Graph prepare failed due to VTCM overflow", "vtcm_or_memory"),
    ("ggml-hex: op MUL_MAT on HTP0 timed out during decode", "execute_failed_6000"),
    ("tvm._ffi.base.TVMError: Hexagon: Failed to create the RPC session to the Hexagon launcher",
     "device_lib_missing_or_load_failure"),
])
def test_other_runtimes_wordings(log: str, category: str) -> None:
    r = triage_log(text=log + "\n")
    assert r.category == category, r.hypotheses


def test_the_executorch_prefix_is_not_an_execute_verb() -> None:
    """'[Qnn ExecuTorch]' on every line of an ExecuTorch log must not make a graph line read as a graph run."""
    r = triage_log(text="[ERROR] [Qnn ExecuTorch]: Failed to compose the QNN graph for node aten_view_copy\n")
    assert r.category == "finalize_failed_1002", r.hypotheses


def test_an_ort_node_no_ep_can_run_is_an_unsupported_op() -> None:
    log = ("[E:onnxruntime:, inference_session.cc:1981] Node 'Resize_17' OpType:Resize with domain:com.ms.internal.nhwc "
           "was inserted using the NHWC format as requested by QNNExecutionProvider, but was not selected by that EP.\n")
    assert triage_log(text=log).category == "unsupported_op_not_registered"


def test_chinese_words_against_the_float_model() -> None:
    r = triage_log(text="MNN 转成 QNN 以后跑出来的结果和 onnx 对不上\n")
    assert r.category == "wrong_results_accuracy" and r.basis == "words"


@pytest.mark.parametrize(("log", "category"), [
    ("[ERROR] Failed to create the intermediate tensor dump folder /sdcard/qnn_dump", "dump_path_error_7004"),
    ("qnn-net-run: cannot open debug directory ./output/debug for writing", "dump_path_error_7004"),
    ("runner: input 'input_ids' shape [1,128] does not match the compiled context binary [1,64]", "offline_io_mismatch_1003_6004"),
    ("E: number of graph inputs (3) differs from the offline model's cached binary (2)", "offline_io_mismatch_1003_6004"),
    ("onnxruntime: [ShapeInferenceError] Inferred shape and existing shape differ in dimension 1: (64) vs (128)",
     "shape_compute_error"),
])
def test_dump_io_and_shape_wordings(log: str, category: str) -> None:
    r = triage_log(text=log + "\n")
    assert r.category == category, r.hypotheses


def test_a_denied_vendor_property_is_harmless() -> None:
    log = ('01-01 10:00:00.000  4000  4000 E libc    : Access denied finding property "vendor.fastrpc.process.attrs"\n'
           "01-01 10:00:00.100  4000  4000 I runner  : inference done in 4.1 ms\n")
    assert triage_log(text=log).category == "other"


@pytest.mark.parametrize(("log", "category"), [
    ("App: NPU not detected on this device, running the model on CPU", "device_lib_missing_or_load_failure"),
    ("error: no Hexagon NPU found (is the QNN driver installed?)", "device_lib_missing_or_load_failure"),
    ("MNN OpenCL: clEnqueueNDRangeKernel returned CL_OUT_OF_RESOURCES", "vtcm_or_memory"),
    ("AI Hub compile job: Compilation failed for the model: Tensor 'ids' has unsupported dtype int64",
     "unsupported_op_not_registered"),
])
def test_devices_not_found_gpu_memory_and_a_model_compilation(log: str, category: str) -> None:
    r = triage_log(text=log + "\n")
    assert r.category == category, r.hypotheses


@pytest.mark.parametrize(("log", "category"), [
    ("QnnGraph_finalize -> Qnn_ErrorHandle_t: 0x3ea (graph decoder_0)", "finalize_failed_1002"),
    ("htp_runner: graph run rc=6031", "execute_failed_6000"),
])
def test_status_spellings(log: str, category: str) -> None:
    assert triage_log(text=log + "\n").category == category


@pytest.mark.parametrize(("log", "category"), [
    ("GenieDialogConfig_createFromJson returned GENIE_STATUS_ERROR_JSON_SCHEMA", "build_error"),
    ("genie-t2t-run: dialog query -> GENIE_STATUS_ERROR_GENERATE_FAILED", "execute_failed_6000"),
    ("GenieDialog_create: GENIE_STATUS_ERROR_MEM_ALLOC", "vtcm_or_memory"),
])
def test_genie_status_reasons(log: str, category: str) -> None:
    assert triage_log(text=log + "\n").category == category


def test_a_bare_genie_general_error_names_nothing() -> None:
    assert triage_log(text="ChatApp: GenieDialog_create returned GENIE_STATUS_ERROR_GENERAL\n").category == "other"


@pytest.mark.parametrize("log", [
    "GroupNorm isn't supported by the HTP backend yet",
    "[QNN] op ScatterElements is not yet supported",
])
def test_unsupported_spellings(log: str) -> None:
    assert triage_log(text=log + "\n").category == "unsupported_op_not_registered"


@pytest.mark.parametrize("log", [
    "ImportError: DLL load failed while importing onnxruntime_genai: The specified procedure could not be found. (QNN build)",
    "OSError: [WinError 126] The specified module could not be found. Error loading \"C:\\qnn\\lib\\QnnHtp.dll\"",
])
def test_windows_dll_loading_failures(log: str) -> None:
    assert triage_log(text=log + "\n").category == "device_lib_missing_or_load_failure"


def test_a_version_that_is_not_compatible() -> None:
    r = triage_log(text="QAIRT SDK version 2.31 is not compatible with onnxruntime-qnn 1.20 (built for 2.28)\n")
    assert r.category == "sdk_version_or_lib_mismatch"


def test_a_model_part_that_fails_to_execute() -> None:
    assert triage_log(text="QNN VAE decoder exec failed (step 3)\n").category == "execute_failed_6000"


@pytest.mark.parametrize(("log", "category"), [
    ("QnnDsp <E> Failed to create context from binary for decoder_2", "sdk_version_or_lib_mismatch"),
    ("could not prepare the HTP graph for the decoder", "finalize_failed_1002"),
])
def test_a_decoder_named_in_a_line_is_not_a_run(log: str, category: str) -> None:
    assert triage_log(text=log + "\n").category == category


@pytest.mark.parametrize("log", [
    "python llmexport.py --path Qwen3-8B --export mnn --generate_for_npu\nloading model...\nKilled\n",
    "./run.sh: line 12: 40211 Killed                  ./qnn-net-run --backend libQnnHtp.so\n",
    "python llmexport.py --path Qwen3-8B\n已杀死\n",
])
def test_a_process_the_shell_reports_killed_ran_out_of_memory(log: str) -> None:
    assert triage_log(text=log).category == "vtcm_or_memory"


def test_killed_inside_a_sentence_is_not_the_shell() -> None:
    assert triage_log(text="Killed the old adb server, restarting QNN run\ninference done\n").category == "other"
