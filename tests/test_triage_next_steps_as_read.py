"""Next steps and evidence read the way an engineer reads the log: the QNN call behind MNN's bare 'Error in file
..., line N' status, the op a rejected node's name ends in, llm-check for a rotary/Gather validation failure, no
op lookup for the op that only read a baked tensor, one evidence row per line, no step printed twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_debug.triage import triage_log

CORPUS = Path(__file__).resolve().parent / "fixtures" / "triage_corpus"


@pytest.mark.parametrize(("line", "category", "call"), [
    ("Error in file /src/MNN/source/backend/qnn/backend/QNNBackend.cpp, line 1156: error code 1002",
     "sdk_version_or_lib_mismatch", "contextCreateFromBinary"),
    ("E MNNJNI  : Error in file QNNBackend.cpp, line 2009: error code 1002", "finalize_failed_1002", "graphFinalize"),
    ("Error in file QNNBackend.cpp, line 2036: error code 6000", "execute_failed_6000", "graphExecute"),
])
def test_mnn_status_lines_are_read_back_to_the_qnn_call(line: str, category: str, call: str) -> None:
    r = triage_log(text=line + "\n")
    assert r.category == category, r.hypotheses
    assert any(f.startswith(f"QNNBackend.cpp line {line.split('line ')[1].split(':')[0]} is {call}") for f in r.facts), r.facts
    assert r.evidence[0].text == line  # evidence stays the log's own line


def test_an_unknown_line_keeps_the_plain_reading_of_the_code() -> None:
    r = triage_log(text="Error in file QNNBackend.cpp, line 7: error code 1002\n")
    assert r.category == "finalize_failed_1002" and not any("line 7 is" in f for f in r.facts)


@pytest.mark.parametrize(("node", "op"), [("_layers_23_self_attn_o_proj_Linear_MatMul", "MatMul"),
                                          ("_model_conv1_Conv2d", "Conv2d"), ("/blocks.3/Softmax", "Softmax")])
def test_a_rejected_node_name_names_its_op(node: str, op: str) -> None:
    r = triage_log(text=f"<E> QnnBackend_validateOpConfig failed 3110\n<E> Failed to validate op {node} with error 0xc26\n")
    assert r.category == "op_validation_failed_3110_0xc26"
    assert r.next_steps[0].cli is not None and r.next_steps[0].cli.startswith(f"qnn-debug op {op}"), r.next_steps
    clis = [s.cli for s in r.next_steps]
    assert len(clis) == len(set(clis)) and 'qnn-debug op "$OP"' not in clis


def test_a_rotary_gather_validation_failure_in_an_llm_export_suggests_llm_check_first() -> None:
    r = triage_log(text="[Step 3] generating context binary\nFailed to validate op _rotary_Gather with error 0xc26\n")
    assert r.next_steps[0].tool == "check_llm_export" and "index tensor" in r.next_steps[0].why
    assert len({e.line for e in r.evidence}) == len(r.evidence)


def test_the_op_under_get_tensor_idx_is_not_offered_as_the_culprit() -> None:
    r = triage_log(CORPUS / "mnn-4716-gdb.log")
    assert r.category == "convert_segfault"
    assert not any(s.cli and "StridedSlice" in s.cli for s in r.next_steps), r.next_steps
    assert len({e.line for e in r.evidence}) == len(r.evidence)


def test_the_failing_category_names_its_op_before_a_fallback_line_does() -> None:
    r = triage_log(CORPUS / "mnn-4475.log")
    assert r.category == "op_validation_failed_3110_0xc26"
    assert r.next_steps[0].cli == "qnn-debug op MatMul --probe", r.next_steps
    assert not any("stops right after" in w for w in r.warnings)


def test_an_export_log_that_ends_after_a_fused_op_fell_back_says_it_stopped() -> None:
    r = triage_log(text="$ ./compilefornpu llm.mnn qnn/llm.mnn qnn.json\nMNN_QNN: Not registered type 306, /layers.0/FusedRoPE.\n")
    assert any("stops right after an LLM fused op fell back" in w and "stdbuf -o0" in w for w in r.warnings), r.warnings
