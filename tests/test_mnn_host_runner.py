"""The host target's own runner: what it needs from an MNN build, said as typed errors before anything runs.

No MNN build is needed here: each case is a build folder missing one thing (the QNN backend, libMNN.so, MNN's
headers, the dump flag, a compiler, a library that links). The real build's runs are in
``test_mnn_host_real.py`` (``QNN_DEBUG_MNN_BUILD``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.examples import deep_conv_net, small_cnn

runner = CliRunner()
HEADER = "typedef enum {\n    MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS = 1 << 16,\n} MNNQnnMode;\n"


def _build(tmp: Path, *, qnn: str = "ON", lib: bool = True, header: str | None = HEADER, cache_source: bool = True) -> Path:
    src, build = tmp / "MNN", tmp / "build"
    (src / "include" / "MNN").mkdir(parents=True)
    build.mkdir()
    if header is not None:
        (src / "include" / "MNN" / "MNNForwardType.h").write_text(header)
    lines = [f"MNN_QNN:BOOL={qnn}", "CMAKE_BUILD_TYPE:STRING=Release"]
    if cache_source:
        lines.append(f"MNN_SOURCE_DIR:STATIC={src}")
    (build / "CMakeCache.txt").write_text("\n".join(lines) + "\n")
    if lib:
        (build / "libMNN.so").write_bytes(b"not a library")
    return build


def _dump(tmp: Path, build: Path, *extra: str) -> tuple[int, dict]:
    model = tmp / "m.onnx"
    if not model.exists():
        onnx.save(small_cnn(), str(model))
    res = runner.invoke(app, ["dump", str(model), "--target", "host", "--option", f"mnn_build_dir={build}", *extra,
                              "--out", str(tmp / "run"), "--json"])
    return res.exit_code, json.loads(res.stdout)


def test_a_build_without_the_qnn_backend_is_refused_with_the_cmake_switch(tmp_path: Path) -> None:
    code, doc = _dump(tmp_path, _build(tmp_path, qnn="OFF"))
    assert code == 2 and "MNN_QNN=OFF" in doc["message"] and "-DMNN_QNN=ON" in doc["hint"]
    assert not (tmp_path / "run").exists()


def test_a_build_without_libmnn_is_refused(tmp_path: Path) -> None:
    code, doc = _dump(tmp_path, _build(tmp_path, lib=False))
    assert code == 2 and "no libMNN.so" in doc["message"]


def test_mnn_sources_come_from_the_cache_or_the_option(tmp_path: Path) -> None:
    build = _build(tmp_path, cache_source=False)
    code, doc = _dump(tmp_path, build)
    assert code == 2 and "mnn_source_dir" in doc["hint"]
    code, doc = _dump(tmp_path, build, "--option", f"mnn_source_dir={tmp_path / 'nowhere'}")
    assert code == 2 and "MNNForwardType.h" in doc["message"]


def test_an_mnn_without_the_dump_flag_is_refused(tmp_path: Path) -> None:
    code, doc = _dump(tmp_path, _build(tmp_path, header="typedef enum { MNN_GPU_RECORD_OP = 1 } X;\n"))
    assert code == 2 and "MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS" in doc["message"] and "offline" in doc["hint"]


def test_no_compiler_is_a_target_error_saying_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))
    code, doc = _dump(tmp_path, _build(tmp_path))
    assert code == 3 and "no C++ compiler" in doc["message"] and "g++" in doc["hint"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_runner_that_does_not_compile_names_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The headers here are not MNN's: the compiler's own last lines come back, nothing is cached."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build = _build(tmp_path)
    code, doc = _dump(tmp_path, build)
    assert code == 3 and "did not compile" in doc["message"] and "Executor.hpp" in doc["message"]
    assert "mnn_source_dir" in doc["hint"]
    cached = tmp_path / "cache" / "qnn-debug" / "mnn-runner"
    assert cached.is_dir() and list(cached.iterdir()) == []  # no half-built runner left behind


# --- the runner's real words and dumps, replayed: a compiler double writes a replaying "runner" ------------------

REAL = Path(__file__).parent / "fixtures" / "mnn-host-real"
# recorded on the real online build (MNN 4d40bdb, HTP simulator): deep_conv_net(blocks=B, channels=4, size=8)
HEALTHY = REAL / "runner_online_healthy_conv"  # B=1: Conv+BN+Relu only
BUGGY = REAL / "runner_online_binary_relu_bug"  # B=2: block 1's Add+Relu, which MNN fuses into one BinaryOp


@pytest.fixture()
def replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    from doubles.fake_phone import python_wrapper

    libs, sdk = tmp_path / "qnn-libs", tmp_path / "sdk"
    libs.mkdir()
    (libs / "libQnnHtp.so").write_bytes(b"placeholder")
    (sdk / "lib" / "x86_64-linux-clang").mkdir(parents=True)
    paths = {"build": _build(tmp_path), "libs": libs, "sdk": sdk, "env": tmp_path / "env.json",
             "cxx_log": tmp_path / "cxx.jsonl", "healthy": tmp_path / "healthy.onnx", "buggy": tmp_path / "buggy.onnx"}
    onnx.save(deep_conv_net(blocks=1, channels=4, size=8), str(paths["healthy"]))
    onnx.save(deep_conv_net(blocks=2, channels=4, size=8), str(paths["buggy"]))
    monkeypatch.setenv("CXX", str(python_wrapper(tmp_path / "bin" / "g++", "fake_cxx.py")))
    monkeypatch.setenv("FAKE_CXX_LOG", str(paths["cxx_log"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("REPLAY_ENV_LOG", str(paths["env"]))
    return paths


def _host(replay: dict[str, Path], command: str, out: Path, case: Path = HEALTHY) -> tuple[int, dict]:
    model = replay["buggy" if case == BUGGY else "healthy"]
    res = runner.invoke(app, [command, str(model), "--target", "host", "--inputs", str(case / "inputs.npz"),
                              "--option", f"mnn_build_dir={replay['build']}", "--option", f"qnn_lib_dir={replay['libs']}",
                              "--option", f"qnn_sdk={replay['sdk']}", "--out", str(out), "--json"])
    return res.exit_code, json.loads(res.stdout)


def test_a_real_online_dump_of_every_tensor_is_read_and_judged_healthy(replay: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The real build's dump of a conv net (14 tensors, fp16 codes from the HTP simulator) through `diagnose` from
    the ONNX: read, aligned with ONNX Runtime's tensors, at the fp16 floor."""
    monkeypatch.setenv("REPLAY_MNN_LOG", str(HEALTHY / "runner.log"))
    monkeypatch.setenv("REPLAY_DUMP", str(HEALTHY / "dump"))
    code, doc = _host(replay, "diagnose", tmp_path / "diag")
    assert code == 0, doc
    compare = doc["compare"]
    assert compare["verdict"]["kind"] == "ok", compare["verdict"]["summary"]
    assert compare["counts"]["aligned"] >= 10, compare["counts"]
    run = json.loads((tmp_path / "diag" / "host" / "run.json").read_text())
    assert run["extra"]["mode"] == "online" and run["extra"]["converted_model"] == "model.mnn"
    assert "qnn-debug-runner: done" in (tmp_path / "diag" / "host" / "logs" / "mnn_runner.log").read_text()
    seen = json.loads(replay["env"].read_text())  # what the runner was started with
    assert seen["QNN_SDK_ROOT"] == str(replay["sdk"].absolute())
    assert seen["LD_LIBRARY_PATH"].split(":")[:3] == [str(replay["libs"]), str(replay["build"]),
                                                      str(replay["build"] / "express")]
    compiled = [json.loads(line) for line in replay["cxx_log"].read_text().splitlines()]
    assert len(compiled) == 1 and f"-I{replay['build'].parent / 'MNN' / 'include'}" in " ".join(compiled[0]).replace(
        "-I ", "-I")
    # the runner is compiled once per build: a second dump reuses it; a rebuilt libMNN.so compiles it again
    code, _ = _host(replay, "dump", tmp_path / "again")
    assert code == 0 and len(replay["cxx_log"].read_text().splitlines()) == 1
    (replay["build"] / "libMNN.so").write_bytes(b"rebuilt library")
    code, _ = _host(replay, "dump", tmp_path / "rebuilt")
    assert code == 0 and len(replay["cxx_log"].read_text().splitlines()) == 2


def test_the_real_dump_of_a_fused_add_relu_names_mnns_binary_op_as_a_real_bug(
        replay: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MNN fuses Add+Relu into one BinaryOp (activationType 1); its QNN translation drops the ReLU (measured on the
    real build; ModuleBasic's own check fails on the output too). With the ONNX's floor and re-run: real_bug."""
    monkeypatch.setenv("REPLAY_MNN_LOG", str(BUGGY / "runner.log"))
    monkeypatch.setenv("REPLAY_DUMP", str(BUGGY / "dump"))
    code, doc = _host(replay, "diagnose", tmp_path / "diag", BUGGY)
    assert code == 0, doc
    compare = doc["compare"]
    v, ff = compare["verdict"], compare["first_failing"]
    assert v["kind"] == "real_bug" and ff["op"] == "b1_add" and ff["fused"]["op_type"] == "BinaryOp", v["summary"]
    assert "fused Relu b1_relu missing" in v["summary"]
    assert ff["local_error"]["sqnr_db"] < 20.0
    # every tensor left unaligned is counted under a reason, and the counts add up
    reasons = compare["unaligned_by_reason"]
    assert sum(reasons.values()) == compare["counts"]["unaligned"] > 0, reasons
    assert reasons["in the reference only: the target fused it into another op or did not dump it"] >= 3, reasons
    # the pattern is named for what it is, and the fix that keeps the Relu out of the fusion is offered first
    assert v["pattern"] == "fused_activation_dropped", v["pattern"]
    first = compare["next_steps"][0]
    assert first["tool"] == "fix_and_prove" and first["cli"].startswith("qnn-debug fix ") and "b1_relu" in first["why"]
    assert "--option mnn_build_dir" in first["why"]  # a host run: the fix can be proven on the same build


def test_a_refused_op_in_the_runner_is_named(replay: dict[str, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The real online run of a decoder with 4-input Slices: MNN refuses StridedSlice, the forward fails."""
    monkeypatch.setenv("REPLAY_MNN_LOG", str(REAL / "runner_online_strided_slice_type91.log"))
    code, doc = _host(replay, "dump", tmp_path / "run")
    assert code == 3 and doc["error"] == "unsupported_nodes", doc
    assert "StridedSlice (MNN OpType 91) at '/layers.0/self_attn/rotary_q/Slice_1_output_0'" in doc["message"]
    assert "5 inputs" in doc["message"] and "steps" in doc["hint"]
    assert "StaticModule resize failed" in doc["details"]["log_tail"]
    # no tensors, but the runner's whole log stays where the message says; a new run there replaces that attempt
    log = tmp_path / "run" / "logs" / "mnn_runner.log"
    assert f"(MNN's log: {log})" in doc["message"] and "Don't support type 91" in log.read_text()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["failed.json", "logs"]
    monkeypatch.setenv("REPLAY_MNN_LOG", str(HEALTHY / "runner.log"))
    monkeypatch.setenv("REPLAY_DUMP", str(HEALTHY / "dump"))
    code, doc = _host(replay, "dump", tmp_path / "run")
    assert code == 0 and not (tmp_path / "run" / "failed.json").exists(), doc


def test_a_failed_forward_without_a_refusal_says_what_mnn_printed(replay: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "failed.log"  # the real refusal log minus the refusal lines: the forward's own failure
    kept = [ln for ln in (REAL / "runner_online_strided_slice_type91.log").read_text().splitlines()
            if "support type" not in ln and "execution error" not in ln]
    log.write_text("\n".join(kept) + "\n")
    monkeypatch.setenv("REPLAY_MNN_LOG", str(log))
    code, doc = _host(replay, "dump", tmp_path / "run")
    assert code == 3 and doc["error"] != "unsupported_nodes"
    assert "forward pass returned no outputs" in doc["message"] and "StaticModule resize failed" in doc["message"]


def test_the_real_ppocr_det_manifest_reads(tmp_path: Path) -> None:
    """PP-OCRv4 det's real online manifest (its 4 MB of tensors not kept): every row parses, the Deconvolution's
    tensor (t370, where MNN's QNN backend drops the fused ReLU) is in it."""
    from qnn_debug.mnn.dump_scan import scan_dump_dir

    shutil.copy(REAL / "runner_online_ppocr_det_manifest.tsv", tmp_path / "manifest_000000.tsv")
    execution = scan_dump_dir(tmp_path).executions[0]
    assert not execution.malformed and len(execution.entries) == 524
    assert any(e.name == "t370" and e.file == "execution_000000_tensor_0520_t370.raw" for e in execution.entries)


def test_diagnose_runs_your_own_mnn_on_the_host_and_gates_it(replay: dict[str, Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`diagnose MODEL.onnx --mnn-model yours.mnn --target host`: the reference and floor from the ONNX, your .mnn
    on MNN's QNN backend, and the baseline's gate on your .mnn."""
    monkeypatch.setenv("REPLAY_MNN_LOG", str(HEALTHY / "runner.log"))
    monkeypatch.setenv("REPLAY_DUMP", str(HEALTHY / "dump"))
    code, first = _host(replay, "diagnose", tmp_path / "d1")
    assert code == 0, first
    mine = tmp_path / "mine.mnn"
    shutil.copy(tmp_path / "d1" / "host" / "model.mnn", mine)  # the .mnn of this ONNX (here: converted by MNN)
    res = runner.invoke(app, ["diagnose", str(replay["healthy"]), "--mnn-model", str(mine), "--target", "host",
                              "--inputs", str(HEALTHY / "inputs.npz"), "--option", f"mnn_build_dir={replay['build']}",
                              "--out", str(tmp_path / "d2"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["compare"]["verdict"]["kind"] == "ok" and "Your mine.mnn agrees with ONNX Runtime" in doc["baseline_sentence"]
    run = json.loads((tmp_path / "d2" / "host" / "run.json").read_text())
    assert "converted_model" not in run["extra"] and run["model"]["path"].endswith("mine.mnn")
    ran = json.loads(replay["env"].read_text())["argv"]
    assert ran[1] == str(mine.absolute())
    # the simulator runs the ONNX model: --mnn-model is refused there, before anything runs
    res = runner.invoke(app, ["diagnose", str(replay["healthy"]), "--mnn-model", str(mine), "--out",
                              str(tmp_path / "d3"), "--json"])
    assert res.exit_code == 2 and "--target host or device" in json.loads(res.stdout)["hint"]


def test_the_offline_chain_asks_for_an_mnn(tmp_path: Path) -> None:
    code, doc = _dump(tmp_path, _build(tmp_path), "--option", "mode=offline")
    assert code == 2 and "takes an .mnn model" in doc["message"] and "--mnn-model" in doc["hint"]


def test_fix_of_a_fused_add_relu_is_checked_on_the_host_build(replay: dict[str, Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`fix` on the BinaryOp case: the converted .mnn keeps Max(x, 0) as its own op (its producer moves from the fused
    Add to the new BinaryOp: main refused it because both are BinaryOps), and with the host build given the fixed model
    is diagnosed on MNN's own QNN backend. The replayed dump is the buggy model's (its tensor numbering no longer fits
    the fixed .mnn), so the host check must fail and say what it saw; the real build proves it (test_mnn_host_real)."""
    monkeypatch.setenv("REPLAY_MNN_LOG", str(BUGGY / "runner.log"))
    monkeypatch.setenv("REPLAY_DUMP", str(BUGGY / "dump"))
    code, _ = _host(replay, "diagnose", tmp_path / "diag", BUGGY)
    assert code == 0
    res = runner.invoke(app, ["fix", str(tmp_path / "diag"), "--out", str(tmp_path / "fix"),
                              "--option", f"mnn_build_dir={replay['build']}", "--option", f"qnn_lib_dir={replay['libs']}",
                              "--json"])
    assert res.exit_code == 1, res.output  # a proof check failed
    doc = json.loads(res.stdout)
    checks = {c["name"]: c for c in doc["proof"]}
    assert checks["the converted .mnn keeps the activation as its own op"]["passed"], checks
    gone, jumps = checks["the fused op's jump is gone (host build)"], checks["no op jumps beyond its floor (host build)"]
    assert not gone["passed"] and "b1_relu not aligned in the host run" in gone["detail"], gone
    assert "first failing now flat (Flatten)" in gone["detail"] and "b1_relu is still fused into flat" in gone["detail"]
    assert not jumps["passed"] and "verdict real_bug" in jumps["detail"] and "first failing flat (Flatten)" in jumps["detail"]
    assert not doc["proven"] and doc["not_proven"] == [] and "On MNN's own QNN backend (host build)" in doc["summary"]
    # NOT proven says which conditions failed, in the summary and on the first line of the text
    assert "NOT proven (failed: the fused op's jump is gone (host build); no op jumps" in doc["summary"]
    text = runner.invoke(app, ["fix", str(tmp_path / "diag"), "--out", str(tmp_path / "fix2"), "--option",
                               f"mnn_build_dir={replay['build']}", "--option", f"qnn_lib_dir={replay['libs']}"]).stdout
    assert text.splitlines()[0].endswith("NOT proven: failed the fused op's jump is gone (host build); no op jumps "
                                         "beyond its floor (host build)"), text.splitlines()[0]
    assert (tmp_path / "fix" / "host" / "host" / "run.json").is_file()


@pytest.mark.parametrize("case", [BUGGY, HEALTHY])
def test_compare_targets_locates_where_mnns_qnn_path_leaves_the_qnn_ep(replay: dict[str, Path], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch, case: Path) -> None:
    """The real host dump (MNN's own QNN path) against ONNX Runtime's QNN EP on the same simulator, same inputs: on the
    net whose BinaryOp drops its fused Relu the gap opens at that op; on the healthy net no op opens one."""
    monkeypatch.setenv("REPLAY_MNN_LOG", str(case / "runner.log"))
    monkeypatch.setenv("REPLAY_DUMP", str(case / "dump"))
    code, _ = _host(replay, "diagnose", tmp_path / "d", case)
    assert code == 0
    model = replay["buggy" if case == BUGGY else "healthy"]
    res = runner.invoke(app, ["dump", str(model), "--target", "htp-sim", "--inputs", str(tmp_path / "d" / "baseline" /
                                                                                        "inputs.npz"),
                              "--out", str(tmp_path / "sim"), "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["compare-targets", str(tmp_path / "d" / "baseline"), str(tmp_path / "d" / "host"),
                              str(tmp_path / "sim"), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert (r["label_a"], r["label_b"]) == ("host", "htp-sim") and len(r["rows"]) >= 8
    if case == BUGGY:
        first = r["first_gap"]
        assert first is not None and first["name"] in ("b1_add", "b1_relu") and first["gap_db"] > 20, r["summary"]
        assert first["target_a_name"].startswith("t") and "host first falls" in r["summary"]
        assert r["next_steps"][0]["cli"].startswith("qnn-debug op ")
    else:
        assert r["first_gap"] is None and "first falls" not in r["summary"], r["summary"]
    text = runner.invoke(app, ["compare-targets", str(tmp_path / "d" / "baseline"), str(tmp_path / "d" / "host"),
                               str(tmp_path / "sim")]).stdout
    assert text.startswith("compare-targets: host") and r["summary"][:60] in text
