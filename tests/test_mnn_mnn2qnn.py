"""MNN2QNNModel runner (against a named test double of the tool) and the SoC table."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from doubles.fake_phone import python_wrapper
from qnn_debug.errors import BadInputError, TargetError
from qnn_debug.mnn.mnn2qnn import build_command, c_identifier, output_names, run_mnn2qnn, shape_string
from qnn_debug.mnn.model_reader import read_mnn_model
from qnn_debug.mnn.soc import parse_arch, resolve, soc_by_id, soc_by_part


def test_soc_table() -> None:
    assert [(s, soc_by_id(s).htp_arch) for s in (36, 42, 43, 57, 69, 30)] == [(36, 69), (42, 69), (43, 73), (57, 75),
                                                                            (69, 79), (30, 68)]
    assert soc_by_id(57).name == "Snapdragon 8 Gen 3" and soc_by_id(69).arch_tag == "v79"
    assert soc_by_part("sm8750").soc_id == 69 and soc_by_part("SM8350P").soc_id == 30 and soc_by_part("SM1234") is None
    with pytest.raises(BadInputError) as e:
        soc_by_id(99)
    assert "57 = Snapdragon 8 Gen 3 (v75)" in (e.value.hint or "")
    assert parse_arch("v75") == 75 and parse_arch(73) == 73
    with pytest.raises(BadInputError):
        parse_arch("vx")
    assert resolve(43) == (43, 73)
    with pytest.raises(BadInputError, match="v73, not v75"):
        resolve(43, 75)


def test_names_and_command() -> None:
    assert c_identifier("my-model.v2") == "my_model_v2" and c_identifier("1net") == "m_1net" and c_identifier("ok_1") == "ok_1"
    assert output_names("net", 57, 75) == ("net_57_75.mnn", "net_57_75.bin")
    assert shape_string({"b": [1, 10], "a": [1, 3, 8, 8]}, ["a", "b"]) == "1x3x8x8_1x10"
    assert build_command("M", "/sdk", 57, 75, "s.mnn", "out", ["1x3x8x8"], dump=True) == [
        "M", "/sdk", "57", "75", "s.mnn", "out", "1", "1x3x8x8", "--dump_intermediate_outputs"]
    for bad in ("1x3x", "1,3", "$(id)"):
        with pytest.raises(BadInputError):
            build_command("M", "/sdk", 57, 75, "s.mnn", "out", [bad])


@pytest.fixture()
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    exe = python_wrapper(tmp_path / "tools" / "MNN2QNNModel", "fake_mnn2qnn.py")
    sdk = tmp_path / "sdk"
    (sdk / "bin" / "x86_64-linux-clang").mkdir(parents=True)
    log = tmp_path / "m2q.jsonl"
    monkeypatch.setenv("FAKE_M2Q_LOG", str(log))
    return exe, sdk, log


def test_converts_a_renamed_copy_and_checks_outputs(tool: tuple[Path, Path, Path], mnn_fixtures: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    exe, sdk, log = tool
    src = tmp_path / "my-model 1.mnn"
    shutil.copyfile(mnn_fixtures / "test.mnn", src)
    monkeypatch.chdir(tmp_path)
    res = run_mnn2qnn(exe, qnn_sdk=sdk, source=src, output_dir=tmp_path / "out dir", soc_id=57, htp_arch="v75",
                      shapes=["1x3x32x32"], dump=True)
    assert res.base == "my_model_1" and res.renamed_from == "my-model 1.mnn" and res.passed
    assert sorted(p.name for p in (tmp_path / "out dir").iterdir()) == ["my_model_1_57_75.bin", "my_model_1_57_75.mnn"]
    wrapper = read_mnn_model(tmp_path / "out dir" / "my_model_1_57_75.mnn")
    assert wrapper.plugin is not None and wrapper.plugin.dump_intermediate_outputs
    assert wrapper.plugin.inputs == ["t0"] and wrapper.plugin.outputs == ["t5"]
    call = json.loads(log.read_text().splitlines()[0])
    assert call["argv"][2:4] == ["57", "75"] and call["argv"][-1] == "--dump_intermediate_outputs"
    assert all(re.fullmatch(r"[A-Za-z0-9_./+=,-]+", a) for a in call["argv"][1:]), "MNN2QNNModel must see shell-inert paths"
    again = run_mnn2qnn(exe, qnn_sdk=sdk, source=src, output_dir=tmp_path / "out dir", soc_id=57)
    assert again.passed and not again.dump_intermediate_outputs
    assert (tmp_path / "out dir" / "my_model_1_57_75.mnn.previous").is_file()
    # the conversion's own meaningless dump stays in the scratch dir, never in the user's CWD
    assert not (tmp_path / "qnn_intermediate_outputs").exists() and call["cwd"] != str(tmp_path)


def test_failures_are_clear(tool: tuple[Path, Path, Path], mnn_fixtures: Path, tmp_path: Path) -> None:
    exe, sdk, _ = tool
    with pytest.raises(BadInputError, match="unknown SoC id"):
        run_mnn2qnn(exe, qnn_sdk=sdk, source=mnn_fixtures / "test.mnn", output_dir=tmp_path / "o", soc_id=12)
    with pytest.raises(BadInputError, match="QNN SDK"):
        run_mnn2qnn(exe, qnn_sdk=tmp_path, source=mnn_fixtures / "test.mnn", output_dir=tmp_path / "o", soc_id=57)
    odd_sdk = tmp_path / "sdk;rm -rf"
    shutil.copytree(sdk, odd_sdk)
    with pytest.raises(BadInputError, match="shell commands would misread"):
        run_mnn2qnn(exe, qnn_sdk=odd_sdk, source=mnn_fixtures / "test.mnn", output_dir=tmp_path / "o", soc_id=57)
    with pytest.raises(BadInputError, match="not found"):
        run_mnn2qnn(tmp_path / "nope", qnn_sdk=sdk, source=mnn_fixtures / "test.mnn", output_dir=tmp_path / "o", soc_id=57)
    broken = python_wrapper(tmp_path / "tools" / "broken", "fake_adb.py")  # any program that writes no outputs
    with pytest.raises(TargetError, match=re.escape("did not produce test_57_75.mnn, test_57_75.bin")):
        run_mnn2qnn(broken, qnn_sdk=sdk, source=mnn_fixtures / "test.mnn", output_dir=tmp_path / "o", soc_id=57)
