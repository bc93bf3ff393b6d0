"""Triage reads the whole text: user words (English, Chinese), command lines, backtraces, logs that stop,
the newer MNN signatures, and the cases file of past solved problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.triage import triage_log
from qnn_debug.triage.backtrace import parse_frames
from qnn_debug.triage.cases import CaseRecord, append_case, read_cases

GDB_4716 = """#0  0x00007ffff7a1b2c4 in MNN::QNN::QnnFloatToHalf (src=0x0, dst=0x7fff, size=262144) at QNNUtils.cpp:88
#1  0x00007ffff7a2c001 in MNN::QNN::QNNTensorWrapper::createStaticFloatTensor (name="QnnTensor_2", buffer=0x0) at QNNWrapper.cpp:120
#2  0x00007ffff7a30abc in MNN::QNN::QnnBackend::getTensorIdx (this=0x5555, tensor=0x6666) at QNNBackend.cpp:2109
#3  0x00007ffff7a31def in MNN::QNN::QnnBackend::getNativeTensor (this=0x5555, tensor=0x6666) at QNNBackend.cpp:2140
#4  0x00007ffff7a44111 in MNN::QNN::QNNStridedSlice::onEncode (this=0x7777, inputs=..., outputs=...) at QNNStridedSlice.cpp:141
#5  0x00007ffff7a45222 in MNN::QNN::QNNCommonExecution::onResize (this=0x7777) at QNNCommonExecution.cpp:24
#6  0x0000555555561333 in _compileWholeModule (...) at compilefornpu.cpp:900
"""


def test_gdb_backtrace_alone_names_the_map_miss_and_is_not_asked_for_again() -> None:
    r = triage_log(text="(gdb) bt\n" + GDB_4716)
    assert r.category == "convert_segfault"
    assert [f.number for f in r.frames][:7] == list(range(7))
    assert {f.known for f in r.frames} >= {"qnn-float-to-half", "create-static-tensor", "get-tensor-idx", "compilefornpu-main"}
    assert any("no need to ask for another backtrace" in f for f in r.facts)
    assert not any("backtrace" in s.why for s in r.next_steps if s.tool == "triage_log")
    # StridedSlice only read the tensor an earlier CPU-fallback op left unmapped: its constraints are not the question
    assert not any(s.cli and "StridedSlice" in s.cli for s in r.next_steps), r.next_steps


def test_full_matching_backtrace_scores_higher_than_a_bare_segfault_line() -> None:
    bare = triage_log(text="Convert for QNN, QualComn's NPU\nSegmentation fault (core dumped)\n")
    full = triage_log(text="Convert for QNN, QualComn's NPU\nSegmentation fault (core dumped)\n" + GDB_4716)
    assert bare.category == full.category == "convert_segfault"
    assert full.hypotheses[0].score >= bare.hypotheses[0].score + 6
    assert full.confidence > bare.confidence


def test_lldb_and_tombstone_frames_are_parsed() -> None:
    lldb = ("* thread #1, stop reason = EXC_BAD_ACCESS\n"
            "  * frame #0: 0x0000000100a1 libMNN.dylib`MNN::QNN::QnnFloatToHalf(float const*, short*, unsigned long) + 24\n"
            "    frame #1: 0x0000000100b2 libMNN.dylib`MNN::QNN::QnnBackend::getTensorIdx(MNN::Tensor const*) + 400\n")
    tomb = ("backtrace:\n"
            "      #00 pc 00000000001a2b3c  /data/local/tmp/libMNN.so (MNN::QNN::RawExecutorWrapper::invokModel()+120)\n"
            "      #01 pc 00000000001a2f00  /data/local/tmp/libMNN.so (MNN::QNN::PluginExecuteRaw::onExecute()+64)\n")
    lf = parse_frames(lldb)
    assert [f.function for f in lf] == ["MNN::QNN::QnnFloatToHalf", "MNN::QNN::QnnBackend::getTensorIdx"]
    assert lf[0].library == "libMNN.dylib" and lf[0].known == "qnn-float-to-half"
    tf = parse_frames(tomb, base_line=10)
    assert [f.number for f in tf] == [0, 1] and tf[0].log_line == 12
    assert all(f.known == "plugin-execute" for f in tf)
    r = triage_log(text="llm_demo config_qnn.json prompt.txt\nFatal signal 11 (SIGSEGV)\n" + tomb)
    assert r.category == "offline_io_mismatch_1003_6004"


@pytest.mark.parametrize(("text", "category"), [
    ("调用 npu/generate_llm_qnn.py 时 Step 2 内部调用 compilefornpu 时发生段错误", "convert_segfault"),
    ("MNN2QNNModel 转换时程序崩溃了", "convert_segfault"),
    ("llm_demo 在手机上跑 config_qnn.json，输出乱码", "garbled_llm_output_quantization"),
    ("The generated text is strange, the prompt was 'hello'", "garbled_llm_output_quantization"),
    ("there is an accuracy discrepancy between the CPU and NPU results", "wrong_results_accuracy"),
    ("指定MNN_FORWARD_NN，但是创建session时无法创建MNN_FORWARD_NN，使用了默认的CPU", "device_lib_missing_or_load_failure"),
])
def test_users_own_words_in_english_and_chinese(text: str, category: str) -> None:
    assert triage_log(text=text).category == category


def test_export_log_that_stops_without_a_crash_line_says_so() -> None:
    log = ("python npu/generate_llm_qnn.py --model qwen --soc_id 57 --dsp_arch v75\nStep1: Make IO\nCost:  2.1  s\n"
           "Step2: Seperate Model\nConvert for QNN, QualComn's NPU\ngCacheDir.c_str()=s qnn in main, 1497 \n")
    r = triage_log(text=log)
    assert r.category == "convert_segfault"
    assert "stopped without a crash line" in r.title
    assert any("stdbuf -o0" in w for w in r.warnings)
    finished = triage_log(text=log + "Write config to npu_postreat.json\nStep3: Compile to QNN\nEnd\n")
    assert finished.category == "other"


def test_command_line_flags_become_facts() -> None:
    log = ("python llmexport.py --path Qwen3-1.7B --export mnn --generate_for_npu --act_bit=16 --sym \\\n"
           "    --seperate_embed\n"
           "python npu/generate_llm_qnn.py --model out --soc_id 57 --dsp_arch 75 --max_history_token 1024\n")
    r = triage_log(text=log)
    assert [c.tool for c in r.commands] == ["llmexport.py", "generate_llm_qnn.py"]
    assert r.commands[0].flags["--act_bit"] == "16" and "--seperate_embed" in r.commands[0].flags
    text = " ".join(r.facts)
    assert "without --smooth or --omni" in text and "--act_sym" in text
    assert "lacks the 'v'" in text and "KVCACHE_SIZE_LIMIT" in text


@pytest.mark.parametrize(("line", "category"), [
    ("QNN: Error: KV length 1100 larger than max size = 1024", "offline_io_mismatch_1003_6004"),
    ("llm_demo config_qnn.json\nQnn attention only support float mask currently", "garbled_llm_output_quantization"),
    ("[QNN] Don't Support NC4HW4 stridedslice now\nError StridedSlice encoding\nResize error for type = 91, name = s",
     "encode_failed"),
    ("Invalid json", "build_error"),
    ("TESTERROR Can't open onnx/input_ids.txt", "wrong_results_accuracy"),
    ("prompt tokens num = 12\n" + "!" * 40, "garbled_llm_output_quantization"),
])
def test_new_signatures(line: str, category: str) -> None:
    assert triage_log(text=line).category == category


def test_clues_are_facts_not_failures() -> None:
    r = triage_log(text="Skip check output\nFound 12 extra break ops between attention_mask and Attention:\n"
                        "For out, max = 0.000000, diffmax = 0.001, diff rate = 1000.0\n")
    text = " ".join(r.facts)
    assert "nothing was compared" in text and "extra break ops" in text and "all-negative" in text
    assert any("Skip check" in w for w in r.warnings)


def test_unknown_op_from_a_log_gets_no_command_that_would_be_refused() -> None:
    r = triage_log(text="QNN validate failed for node 'n1' type 'NoSuchQnnOp', error: 3110\n")
    assert not any("NoSuchQnnOp" in s.cli for s in r.next_steps)
    r2 = triage_log(text="QNN validate failed for node 'n2' type 'StridedSlice', error: 3110\n")
    assert any(s.cli == "qnn-debug op StridedSlice --probe" for s in r2.next_steps)


def test_cases_file_round_trip_and_triage_reads_it(tmp_path: Path) -> None:
    cases = tmp_path / "qnn-debug-cases.jsonl"
    rec = CaseRecord(category="convert_segfault", match="Tensor usage is 0.",
                     cause="RoPE fell back to CPU inside an NPU segment", fix="re-export with --generate_for_npu",
                     source="https://github.com/alibaba/MNN/issues/4716")
    append_case(cases, rec)
    with pytest.raises(BadInputError, match="already has"):
        append_case(cases, rec)
    second = CaseRecord(category="execute_failed_6000", match="Invalid input / output parameters being passed",
                        cause="shapeMutable=true", fix="toggle-shape-mutable --value false")
    append_case(cases, second)
    assert (tmp_path / "qnn-debug-cases.jsonl.previous").read_text().count("\n") == 1
    with cases.open("a") as fh:
        fh.write("not json\n" + json.dumps({"category": "nope", "match": "xxxxxxx", "cause": "abc", "fix": "abc"}) + "\n")
    parsed = read_cases(cases)
    assert len(parsed.records) == 2 and len(parsed.warnings) == 2
    r = triage_log(text="Convert for QNN, QualComn's NPU\nTensor usage is 0.\nSegmentation fault\n", cases=cases)
    assert r.category == "convert_segfault"
    assert [k.cause for k in r.known_cases] == ["RoPE fell back to CPU inside an NPU segment"]
    assert r.known_cases[0].line == 2 and r.facts[0].startswith("known case")
    assert any("line 4 ignored" in w for w in r.warnings)
    plain = triage_log(text="Convert for QNN, QualComn's NPU\nTensor usage is 0.\nSegmentation fault\n")
    assert r.hypotheses[0].score > plain.hypotheses[0].score
    with pytest.raises(BadInputError, match="does not exist"):
        triage_log(text="x", cases=tmp_path / "missing.jsonl")
    with pytest.raises(BadInputError, match="is a directory"):
        triage_log(text="x", cases=tmp_path)


def test_cli_case_add_then_triage_uses_the_default_cases_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    added = runner.invoke(app, ["case-add", "--category", "sdk_version_or_lib_mismatch", "--match",
                                "Failed to validate binary: 1002", "--cause", "context built with QNN 2.46, phone has 2.40",
                                "--fix", "push the SDK's own libQnnHtp*.so"])
    assert added.exit_code == 0, added.output
    (tmp_path / "run.log").write_text("stateNumber=0 in init, 1203 \nQNN: Failed to validate binary: 1002\n")
    out = runner.invoke(app, ["triage", "run.log"])
    assert out.exit_code == 0 and "known case" in out.output and "phone has 2.40" in out.output
    bad = runner.invoke(app, ["case-add", "--category", "bogus", "--match", "something long", "--cause", "abc", "--fix", "abc"])
    assert bad.exit_code == 2 and "unknown category" in bad.output


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_triage_reads_the_workspace_cases_file_and_refuses_one_outside(tmp_path: Path) -> None:
    from test_mcp_support import connect, error_text, ok

    work = tmp_path / "work"
    work.mkdir()
    append_case(work / "qnn-debug-cases.jsonl",
                CaseRecord(category="build_error", match="Can't Find type=32 backend",
                           cause="host build without MNN_QNN_CONVERT_MODE", fix="rebuild with -DMNN_QNN_CONVERT_MODE=ON"))
    (tmp_path / "outside.jsonl").write_text("")
    async with connect(work, "auto") as client:
        default = ok(await client.call_tool("triage_log", {"log_text": "Can't Find type=32 backend, use 0 instead\n"}))
        refused = error_text(await client.call_tool("triage_log", {"log_text": "x y z", "cases_path": str(tmp_path / "outside.jsonl")}))
    assert default["known_cases"][0]["fix"] == "rebuild with -DMNN_QNN_CONVERT_MODE=ON"
    assert "outside the workspace" in refused


def test_cases_file_outside_the_allowed_roots_is_refused(tmp_path: Path) -> None:
    from qnn_debug import fs

    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    append_case(outside / "c.jsonl", CaseRecord(category="other", match="nothing here", cause="abc", fix="abc"))
    fs.set_roots([inside])
    try:
        with pytest.raises(BadInputError, match="outside"):
            triage_log(text="nothing here", cases=outside / "c.jsonl")
        with pytest.raises(BadInputError, match="outside"):
            append_case(outside / "c.jsonl", CaseRecord(category="other", match="something else", cause="abc", fix="abc"))
    finally:
        fs.set_roots(None)


def test_generic_op_step_gives_way_to_the_concrete_one_only() -> None:
    named = triage_log(text="QNN validate failed for node 'n2' type 'StridedSlice', error: 3110\n")
    assert [s.cli for s in named.next_steps if s.tool == "lookup_op_constraints"] == ["qnn-debug op StridedSlice --probe"]
    finalize = triage_log(text="QNN graphFinalize failed! The graph contains unsupported ops\nerror code 1002\n")
    assert [s.tool for s in finalize.next_steps] == ["triage_log", "lookup_op_constraints", "dump_qnn"]
    garbled = triage_log(text="llm_demo config_qnn.json prompt.txt\n输出乱码\n")
    assert garbled.next_steps[0].cli.startswith("qnn-debug llm-check ")
