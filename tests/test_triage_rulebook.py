"""The engine follows the labelling rule book (playbooks/triage-labels.md), and says what its answer rests on.

Every log below was written for this test (other runtimes' formats, other numbers); none is a corpus line.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.triage import triage_log

# Rule 2: a warning the run survives is not the failure when something later stops the run.
SURVIVED_THEN_STOPPED = [
    ("11-02 10:00:00.100  1200  1200 W QnnHtp  : Could not create context from binary, falling back to online prepare\n"
     "11-02 10:00:00.300  1200  1200 I runner  : graph composed, executing\n"
     "11-02 10:00:01.200  1200  1200 F libc    : Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR) in tid 1200 (qnn_runner)\n",
     "convert_segfault"),
    ("[W] QNN: Failed to validate context binary with err 5002, will deserialize anyway\n"
     "[Qnn] executing graph decoder_0\n"
     "Segmentation fault (core dumped)\n", "convert_segfault"),
    ("2025-03-01 10:00:00.001 [W:onnxruntime:, qnn_backend_manager.cc:88] QNN API version mismatch: expected 2.20, found 2.18\n"
     "2025-03-01 10:00:02.500 [E:onnxruntime:, qnn_model.cc:181] Failed to finalize QNN graph. Error code: 1002\n",
     "finalize_failed_1002"),
]


@pytest.mark.parametrize(("log", "category"), SURVIVED_THEN_STOPPED)
def test_a_warning_the_run_survives_gives_way_to_what_stopped_it(log: str, category: str) -> None:
    r = triage_log(text=log)
    assert r.category == category, r.hypotheses


def test_a_clear_error_then_a_crash_keeps_the_errors_category() -> None:
    """Rule 1: the error stops the run; the crash follows from it."""
    log = ("[ERROR] QNN: Failed to create context from binary. Error 5000\n"
           "Segmentation fault (core dumped)\n")
    assert triage_log(text=log).category == "sdk_version_or_lib_mismatch"


def test_a_warning_with_nothing_after_it_still_decides() -> None:
    assert triage_log(text="[WARNING] QnnDsp <W> Failed to interpret QNN context binary. Error code 30010.\n"
                      ).category == "sdk_version_or_lib_mismatch"


def test_a_crash_named_in_a_title_with_another_failure_is_read_as_the_crash() -> None:
    log = ("Segfault in the QNN runner after restoring the cache fails\n"
           "[INFO] [Qnn ExecuTorch]: Caching: Caching is in RESTORE MODE.\n"
           "[WARNING] [Qnn ExecuTorch]: Failed to restore context, composing graph instead\n"
           "Segmentation fault\n")
    assert triage_log(text=log).category == "convert_segfault"


# The typed answer: what decided it, and whether it is a lead or a diagnosis.
def test_basis_is_signature_for_a_known_wording() -> None:
    r = triage_log(text="MNN_QNN: Failed to open QNN libs\n")
    assert r.basis == "signature" and not r.low_confidence and r.low_confidence_reason is None


def test_basis_is_structure_when_only_the_grammar_speaks() -> None:
    r = triage_log(text="could not prepare the HTP graph for decoder_2\n")
    assert r.basis == "structure" and r.low_confidence
    assert r.low_confidence_reason and "structure" in r.low_confidence_reason


def test_basis_is_words_when_only_the_reporter_speaks() -> None:
    r = triage_log(text="My app keeps crashing as soon as the QNN delegate is attached.\n")
    assert r.category == "convert_segfault"
    assert r.basis == "words" and r.low_confidence
    assert r.low_confidence_reason and "own words" in r.low_confidence_reason
    assert r.confidence <= 0.6


def test_basis_is_none_when_nothing_failed() -> None:
    r = triage_log(text="loading model\nrunning 10 iterations\naverage 12.3 ms\n")
    assert r.category == "other" and r.basis == "none" and r.low_confidence


def test_a_stopped_export_is_low_confidence_and_says_how_to_settle_it() -> None:
    log = "./compilefornpu llm.mnn qnn.json\nStep2: Seperate Model\nConvert for QNN, QualComn's NPU\n"
    r = triage_log(text=log)
    assert r.category == "convert_segfault" and r.basis == "structure" and r.low_confidence
    assert r.low_confidence_reason and "stdbuf -o0" in r.low_confidence_reason


def test_cli_prints_the_basis_and_a_low_confidence_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "run.log"
    log.write_text("could not prepare the HTP graph for decoder_2\n")
    out = CliRunner().invoke(app, ["triage", str(log)])
    assert out.exit_code == 0, out.output
    assert "read from structure" in out.output and "LOW CONFIDENCE:" in out.output
    log.write_text("MNN_QNN: Failed to open QNN libs\n")
    out = CliRunner().invoke(app, ["triage", str(log)])
    assert "read from signature" in out.output and "LOW CONFIDENCE" not in out.output


# The borderline readings the rule book settles.
@pytest.mark.parametrize(("log", "category"), [
    # a DSP queue read/write fails while a graph computes: an execution failure
    ("llama_decode: prefill 32 tokens\nggml-hex: dspqueue_write failed: 0x0000004e\n", "execute_failed_6000"),
    ("htp-backend: dspqueue_read returned 0x80000406 while running op MUL_MAT\n", "execute_failed_6000"),
    # opening the queue or the session: the device/library side
    ("ggml-hex: dspqueue_create failed: 0x0000000e\n", "device_lib_missing_or_load_failure"),
    ("hexagon: second session failure - dspqueue_read returns error 0x0000000e on HTP2\n", "device_lib_missing_or_load_failure"),
    # MNN without the backend of that forward type: a build without it
    ("I MNNJNI  : Can't Find type=13 backend, use 0 instead\n", "build_error"),
    ("Can't Find type=5 backend, use 0 instead\n", "build_error"),
])
def test_borderline_readings_follow_the_rule_book(log: str, category: str) -> None:
    assert triage_log(text=log).category == category


# Rule 3: nothing failed (questions, feature requests, healthy runs, notes about fixed bugs) stays 'other'.
@pytest.mark.parametrize("text", [
    "How do I run Qwen3 on the Snapdragon NPU with MNN? Is there a guide for the QNN backend?",
    "Feature request: support for the QNN HTP backend on Snapdragon 8 Elite in llama.cpp",
    "QNN EP performance is slower than CPU EP for my model, 45 ms vs 30 ms. Any ideas?",
    "llm_demo config.json prompt.txt\nprompt: hello\nresponse: Hello! How can I help you today?\ndecode speed 20 tok/s",
    "W/QnnDsp: <W> Initializing HtpProvider\nI/QnnDsp: HTP arch v75\nI: inference done in 4.2 ms",
    "QNN SDK 2.28 release notes: fixed a crash in QnnGraph_finalize; improved accuracy for LayerNorm",
    "Our team compared QNN and SNPE; QNN gives the same accuracy as CPU within 0.1%",
    "Build succeeded: libMNN.so with -DMNN_QNN=ON, 0 errors, 3 warnings",
])
def test_nothing_failed_stays_other(text: str) -> None:
    r = triage_log(text=text + "\n")
    assert r.category == "other", r.hypotheses


def test_a_tombstone_in_logcat_is_parsed_and_no_backtrace_is_asked_for() -> None:
    log = ("12-07 04:15:01.100  9001  9001 F libc    : Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0 in tid 9001 (qnn-runner)\n"
           "12-07 04:15:01.338  9100  9100 F DEBUG   : backtrace:\n"
           "12-07 04:15:01.338  9100  9100 F DEBUG   :       #00 pc 00000000000a4c8  /data/local/tmp/libMNN.so (MNN::QNN::QnnFloatToHalf(float const*, short*, unsigned long)+40)\n"
           "12-07 04:15:01.338  9100  9100 F DEBUG   :       #01 pc 00000000000b1f0  /data/local/tmp/libMNN.so (MNN::QNN::QnnBackend::getTensorIdx(MNN::Tensor const*)+300)\n")
    r = triage_log(text=log)
    assert [f.number for f in r.frames] == [0, 1]
    assert r.frames[0].known == "qnn-float-to-half"
    assert r.category == "convert_segfault" and r.basis == "signature"
    assert not any("backtrace" in s.why for s in r.next_steps if s.tool == "triage_log")


def test_a_prose_line_starting_with_i_is_not_an_info_level_line() -> None:
    """'I got ...' is the reporter, not logcat's I level: it is not discounted as a warning the run survived."""
    log = ("I got Failed to create context from binary with err 5000 on the phone\n"
           "later the app shows a toast\n"
           "W/App: retry 1\n"
           "Segmentation fault\n")
    r = triage_log(text=log)
    assert r.category == "sdk_version_or_lib_mismatch", r.hypotheses


def test_the_reporters_closing_sentence_does_not_stop_the_run() -> None:
    """A warning-level failure stays the label when only the reporter's prose follows it."""
    log = ("[W:onnxruntime:, qnn_model_wrapper.cc:240] QNN.backendValidateOpConfig() failed for node `Conv_7` of type "
           "`Conv2d` with error code 3110\n"
           "Everything else works; I could not load the backend on my other phone either, any idea?\n")
    assert triage_log(text=log).category == "op_validation_failed_3110_0xc26"


def test_an_export_that_stops_says_so_even_when_the_reporter_says_it_crashed() -> None:
    log = ("compilefornpu crashes for me every time\n"
           "./compilefornpu llm.mnn qnn.json\nStep2: Seperate Model\nConvert for QNN, QualComn's NPU\n")
    r = triage_log(text=log)
    assert r.category == "convert_segfault"
    assert "stopped without a crash line" in r.title
    assert r.low_confidence_reason and "stdbuf -o0" in r.low_confidence_reason


def test_the_rule_book_is_a_playbook_covering_every_category_and_unsure_answers_point_to_it() -> None:
    from pathlib import Path

    from qnn_debug.triage.signatures import CATEGORIES

    repo = Path(__file__).resolve().parent.parent
    book = (repo / "playbooks" / "triage-labels.md").read_text(encoding="utf-8")
    assert all(f"| `{c}` |" in book for c in CATEGORIES), "every category has its row in the rule book"
    assert "(triage-labels.md)" in (repo / "playbooks" / "README.md").read_text(encoding="utf-8")
    assert "(playbooks/triage-labels.md)" in (repo / "SKILL.md").read_text(encoding="utf-8")
    told_in_words = triage_log(text="MNN 推理结果不正确，和 PC 上差很多\n")
    assert told_in_words.low_confidence and told_in_words.basis == "words"
    assert "playbooks/triage-labels.md" in (told_in_words.low_confidence_reason or "")
    nothing = triage_log(text="I followed the tutorial and here is my phone model.\n")
    assert nothing.basis == "none" and "playbooks/triage-labels.md" in (nothing.low_confidence_reason or "")
