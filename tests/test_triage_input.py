"""Triage on hostile input: ANSI colours, CRLF, Chinese text, binary junk, empty files, 100 MB logs, stdin."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.triage import triage_log

LINE_6000 = "Error in file /path/to/MNN/source/backend/qnn/backend/QNNBackend.cpp, line 2036: error code 6000"


def test_ansi_crlf_and_chinese_keep_line_numbers(tmp_path: Path) -> None:
    log = tmp_path / "colour.log"
    body = ("\x1b[31m模型转换开始\x1b[0m\r\n" * 3 + "progress 10%\rprogress 100%\r\n"
            + f"\x1b[1;31m{LINE_6000}\x1b[0m\r\nQNN graphExecute failed!\r\n")
    log.write_bytes(body.encode("utf-8"))
    r = triage_log(log)
    assert r.category == "execute_failed_6000"
    first = next(e for e in r.evidence if e.signature == "mnn-call-qnn-execute")
    assert first.line == 5 and first.text == LINE_6000
    assert any("QNN_GRAPH_ERROR_INVALID_ARGUMENT" in f for f in r.facts)


def test_known_noise_does_not_drive_the_answer() -> None:
    noisy = "\n".join(["Broad cast error, dim1 = 960, dim2 = 0", "Compute Shape Error for /Add_3_output_0"] * 50
                      + [" <E> unexpected GraphHtpSettings option 66", "Can't Find type=32 backend, use 0 instead"])
    r = triage_log(text=noisy)
    assert r.category == "build_error"
    assert {n.id for n in r.noise} >= {"llm-export-broadcast", "htp-graph-settings"}
    # "Broad cast error ... dim2 = 0" is a weak hint (it precedes phone crashes, alibaba/MNN#4011): it is
    # listed, with less weight than any single real signature, and never wins on its own.
    weak = [h for h in r.hypotheses if h.category == "shape_compute_error"]
    assert weak and weak[0].score < 3 and "weak hint" in weak[0].why[0]
    only_noise = triage_log(text=" <E> unexpected GraphHtpSettings option 66\nBroad cast error, dim1 = 4, dim2 = 0\n")
    assert only_noise.category == "other"


def test_binary_junk_gives_an_answer_with_a_warning(tmp_path: Path) -> None:
    junk = tmp_path / "core.bin"
    junk.write_bytes(os.urandom(2 << 20))
    start = time.perf_counter()
    r = triage_log(junk)
    assert time.perf_counter() - start < 20
    assert r.category == "other"
    assert r.warnings and "not text" in r.warnings[0]
    assert r.evidence and r.next_steps


def test_empty_missing_and_directory_are_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.log"
    blank.write_bytes(b"\r\n   \n\t\n" * 100)
    for bad in (empty, blank, tmp_path / "missing.log", tmp_path):
        with pytest.raises(BadInputError):
            triage_log(bad)
    runner = CliRunner()
    res = runner.invoke(app, ["triage", str(empty), "--json"])
    assert res.exit_code == 2
    assert json.loads(res.stdout)["error"] == "bad_input"


def test_100_mb_log_is_streamed_quickly(tmp_path: Path) -> None:
    """100 MB of logcat-like lines with the failure at the very end: bounded memory, a few seconds."""
    big = tmp_path / "big.log"
    block = ("06-15 10:37:23.943  9662  9662 I MNNJNI  : Total qnn tensor count:11 \x1b[0m中文\r\n" * 20000).encode("utf-8")
    with big.open("wb") as fh:
        written = 0
        while written < 100 * 1024 * 1024:
            fh.write(block)
            written += len(block)
        fh.write(b"MNN_QNN: Failed to open QNN libs. Ensure that the libs related to the QNN HTP backend is available\n")
    reference = _one_plain_pass(big)
    start = time.perf_counter()
    r = triage_log(big)
    elapsed = time.perf_counter() - start
    assert r.category == "device_lib_missing_or_load_failure"
    assert r.evidence[0].line == r.stats.lines
    assert r.stats.bytes > 100 * 1024 * 1024
    # Relative to one plain pass over the same file on the same machine, so that a loaded CI runner (both slowed alike)
    # does not fail it; about 19x alone. A hang or a quadratic step is far past both limits.
    assert elapsed < 40 * reference and elapsed < 300, f"100 MB took {elapsed:.1f} s, {elapsed / reference:.0f}x one plain pass"


def _one_plain_pass(path: Path) -> float:
    """Seconds to decode every line and search it for a failure word: the floor any streaming triage pays."""
    failure = re.compile(r"error|fail", re.IGNORECASE)
    start = time.perf_counter()
    with path.open("rb") as fh:
        for raw in fh:
            failure.search(raw.decode("utf-8", "replace"))
    return time.perf_counter() - start


def test_cli_json_reads_stdin_in_a_subprocess() -> None:
    proc = subprocess.run([sys.executable, "-m", "qnn_debug", "triage", "-", "--json"], input=f"{LINE_6000}\n".encode(),
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["category"] == "execute_failed_6000"
    assert doc["next_steps"][0]["tool"] == "toggle_shapeMutable"


def test_cli_human_output_names_tools() -> None:
    res = CliRunner().invoke(app, ["triage", "-"], input="MNN_QNN: Not registered type 17, deconv1.\n")
    assert res.exit_code == 0
    assert "unsupported_op_not_registered" in res.stdout
    assert "Deconvolution" in res.stdout and "qnn-debug op" in res.stdout


def test_encode_failure_is_its_own_category_not_a_fallback() -> None:
    log = ("[QNN] Don't Support NC4HW4 stridedslice now\nError StridedSlice encoding\n"
           "Resize error for type = 91, name = /model/Slice_3\n")
    r = triage_log(text=log)
    assert r.category == "encode_failed"
    assert r.playbook.endswith("#encode-failures-error-op-encoding")
    assert any("StridedSlice" in s.cli for s in r.next_steps)


def test_offline_1002_is_not_called_a_finalize_failure() -> None:
    log = "stateNumber=0 in init, 1203 \nError in file QNNBackend.cpp, line 1156: error code 1002\n"
    r = triage_log(text=log)
    assert r.category == "sdk_version_or_lib_mismatch"
