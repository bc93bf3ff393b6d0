"""The engine's one file opener (``qnn_debug.fs``) and the checked npz reader, through their public functions
and the ``qnn-debug --root`` CLI: confinement at the moment of use, file types, limits before allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import hostile
from qnn_debug import fs
from qnn_debug.errors import BadInputError
from qnn_debug.inputs import load_npz
from qnn_debug.mnn.dump_reader import import_mnn_dump
from qnn_debug.mnn.testdir import toggle_shape_mutable
from qnn_debug.runstore import TensorSpec

IMG = TensorSpec(name="x", shape=[1, 3, 8, 8], dtype="float32")
DYN = TensorSpec(name="x", shape=["n", 3], dtype="float32")


@pytest.fixture
def confined(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    fs.set_roots([root])
    try:
        yield root, outside
    finally:
        fs.set_roots(None)


def test_reads_are_confined_at_the_moment_of_use(confined: tuple[Path, Path]) -> None:
    root, outside = confined
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    (root / "ok.txt").write_text("fine")
    assert fs.read_text(root / "ok.txt") == "fine"
    for bad in (outside / "secret.txt", root / "link.txt", root / "dirlink" / "secret.txt"):
        with pytest.raises(BadInputError, match="outside the allowed roots"):
            fs.read_bytes(bad)
    before = hostile.snapshot(outside)
    with pytest.raises(BadInputError, match="outside"):
        fs.atomic_write_text(root / "dirlink" / "new.txt", "x")
    with pytest.raises(BadInputError, match="outside"):
        fs.claim_dir(root / "dirlink" / "run")
    assert hostile.snapshot(outside) == before


def test_a_planted_final_link_is_replaced_never_written_through(confined: tuple[Path, Path]) -> None:
    root, outside = confined
    (root / "report.md").symlink_to(outside / "secret.txt")
    fs.atomic_write_text(root / "report.md", "ours")
    assert (outside / "secret.txt").read_text() == "SECRET"
    assert not (root / "report.md").is_symlink() and (root / "report.md").read_text() == "ours"


@pytest.mark.parametrize("kind", ["fifo", "dev"])
def test_special_files_are_refused_at_once(confined: tuple[Path, Path], kind: str) -> None:
    root, _ = confined
    path = hostile.fifo(root / "in.npz") if kind == "fifo" else Path("/dev/zero")
    if kind == "dev":
        fs.set_roots(None)
    start = time.monotonic()
    with pytest.raises(BadInputError, match="not a regular file"):
        fs.read_bytes(path)
    with pytest.raises(BadInputError, match="not a regular file"):
        load_npz(path, [IMG])
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("make, expected", [
    (lambda r: r / ("n" * 300), "component of 300 bytes"),
    (lambda r: r.joinpath(*["d"] * 2100), "bytes long"),
    (lambda r: hostile.loop(r / "loop") / "x", "symbolic-link loop"),
])
def test_long_paths_and_link_loops_are_typed(confined: tuple[Path, Path], make: object, expected: str) -> None:
    root, _ = confined
    path = make(root)  # type: ignore[operator]
    with pytest.raises(BadInputError, match=expected) as caught:
        fs.make_dirs(path)
    assert caught.value.hint


def test_output_directories_are_claimed_before_any_write(confined: tuple[Path, Path]) -> None:
    root, _ = confined
    out = fs.claim_dir(root / "run")
    with pytest.raises(BadInputError, match=r"being written by another run|not empty"):
        fs.claim_dir(root / "run")
    fs.release_dir(out)
    (root / "empty").mkdir()
    assert fs.claim_dir(root / "empty") == (root / "empty").resolve()


def _npz_cases(tmp: Path) -> list[tuple[str, Path, list[TensorSpec], str]]:
    arr = np.zeros((1, 3, 8, 8), np.float32)
    return [
        ("zip bomb", hostile.zip_bomb(tmp / "bomb.npz", "x", (64, 1024, 1024)), [IMG], "over the limit"),
        ("zip bomb, dynamic input", hostile.zip_bomb(tmp / "bomb2.npz", "x", (96, 1024, 1024)), [DYN], "zip bomb|limit"),
        ("lying size", hostile.lying_size(tmp / "lie.npz", "x", arr), [IMG], "declares 4294967295 bytes"),
        ("zlib error", hostile.broken_deflate(tmp / "z.npz", "x", arr), [IMG], "cannot be read|not a valid"),
        ("duplicate", hostile.duplicate_members(tmp / "dup.npz", "x", arr), [IMG], "twice"),
        ("complex", hostile.complex_npz(tmp / "c.npz", "x", (1, 3, 8, 8)), [IMG], "complex"),
    ]


def test_hostile_npz_is_refused_before_allocation(tmp_path: Path) -> None:
    import resource

    for label, path, specs, expected in _npz_cases(tmp_path):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(BadInputError, match=expected) as caught:
            load_npz(path, specs)
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert caught.value.hint and grown_mib < 50, (label, grown_mib)
        json.dumps(caught.value.to_dict())  # the error is JSON-safe


def _raw(d: Path, name: str, data: bytes) -> str:
    file = f"execution_000000_tensor_0000_{name}.raw"
    (d / file).write_bytes(data)
    return file


@pytest.mark.parametrize("case, expected", [
    ("negative dims", "dimension -4"),
    ("overflowing dims", "dimension 99999999999"),
    ("nan scale", "non-finite scale"),
    ("zero scale", "scale 0"),
    ("link outside", "outside the allowed roots"),
    ("fifo raw", "not a regular file"),
    ("wrong size", "bytes, expected"),
    ("malformed row", "malformed row"),
])
def test_damaged_dump_rows_are_refused_naming_file_and_row(confined: tuple[Path, Path], case: str, expected: str) -> None:
    root, outside = confined
    d = root / "dump"
    d.mkdir()
    four = np.ones(4, np.float32).tobytes()
    builders = {
        "negative dims": lambda: [("t1", _raw(d, "a", four), 562, "-4", 0, "0", "0")],
        "overflowing dims": lambda: [("t1", _raw(d, "a", four), 562, "99999999999x99999999999", 0, "0", "0")],
        "nan scale": lambda: [("t1", _raw(d, "a", bytes(4)), 1046, "2", 0, "nan", "0")],
        "zero scale": lambda: [("t1", _raw(d, "a", bytes(4)), 1046, "2", 0, "0", "0")],
        "link outside": lambda: [("t1", "execution_000000_tensor_0000_l.raw", 562, "4", 0, "0", "0")],
        "fifo raw": lambda: [("t1", "execution_000000_tensor_0000_f.raw", 562, "4", 0, "0", "0")],
        "wrong size": lambda: [("t1", _raw(d, "a", four[:7]), 562, "4", 0, "0", "0")],
        "malformed row": lambda: [("t1", _raw(d, "a", four), 562, "4", 0, "0", "0")],
    }
    rows = builders[case]()
    if case == "link outside":
        (outside / "leak.raw").write_bytes(four)
        (d / "execution_000000_tensor_0000_l.raw").symlink_to(outside / "leak.raw")
    if case == "fifo raw":
        hostile.fifo(d / "execution_000000_tensor_0000_f.raw")
    m = hostile.manifest(d, rows)
    if case == "malformed row":
        with m.open("a") as f:
            f.write("1\tbroken\trow\n")
    start = time.monotonic()
    with pytest.raises(BadInputError, match=expected) as caught:
        import_mnn_dump(d, out=root / "run")
    assert "manifest_000000.tsv row" in caught.value.message and caught.value.hint
    assert not (root / "run").exists() and time.monotonic() - start < 5


def test_non_utf8_tensor_names_stay_json_safe(tmp_path: Path) -> None:
    d = tmp_path / "dump"
    d.mkdir()
    (d / "execution_000000_tensor_0000_a.raw").write_bytes(np.ones(2, np.float32).tobytes())
    header = "index\tname\tfile\tdata_type\tdimensions\tquant_encoding\tscale\toffset\n"
    (d / "manifest_000000.tsv").write_bytes(header.encode() + b"0\tbad\xff\xfename\texecution_000000_tensor_0000_a.raw\t562\t2\t0\t0\t0\n")
    run = import_mnn_dump(d, out=tmp_path / "run")
    json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert run.names() == ["bad\ufffd\ufffdname"]


@pytest.mark.parametrize("doc, expected", [
    ('{"inputs": [{"name": "x", "shape": "1x3"}]}', "unusable shape"),
    ('{"inputs": [{"name": "x", "shape": [99999999999, 99999999999]}]}', "unusable shape"),
    ('{"inputs": [{"name": "x", "shape": [-1]}]}', "unusable shape"),
    ('{"inputs": [{"name": "x", "shape": [1]}], "k": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply|not valid JSON"),
    ('{"inputs": [{"name": "x", "shape": [NaN]}]}', "not valid JSON"),
])
def test_hostile_test_dir_json_is_typed_and_nothing_is_written(tmp_path: Path, doc: str, expected: str) -> None:
    d = hostile.testdir(tmp_path / "td", doc)
    with pytest.raises(BadInputError, match=expected):
        toggle_shape_mutable(d, False)
    assert sorted(p.name for p in d.iterdir()) == ["input.json"] and (d / "input.json").read_text() == doc


def test_toggle_never_edits_through_a_link(confined: tuple[Path, Path]) -> None:
    root, outside = confined
    (outside / "input.json").write_text(json.dumps({"inputs": [{"name": "x", "shape": [1]}]}))
    d = root / "td"
    d.mkdir()
    (d / "input.json").symlink_to(outside / "input.json")
    before = hostile.snapshot(outside)
    with pytest.raises(BadInputError, match="outside the allowed roots"):
        toggle_shape_mutable(d, False)
    fs.set_roots(None)  # even unconfined, a link is never replaced by a copy of its target
    with pytest.raises(BadInputError, match="symbolic link"):
        toggle_shape_mutable(d, False)
    assert hostile.snapshot(outside) == before and (d / "input.json").is_symlink()


def test_cli_root_confines_every_file_and_answers_with_one_json_document(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    np.savez(outside / "secret.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    (root / "inputs.npz").symlink_to(outside / "secret.npz")
    d = root / "dump"
    hostile.manifest(d, [("t1", "execution_000000_tensor_0000_a.raw", 562, "-1", 0, "0", "0")])
    (d / "execution_000000_tensor_0000_a.raw").write_bytes(bytes(4))
    cases = [
        (["compare", str(root / "nothing"), str(d), "--root", str(root)], "does not exist|not a"),
        (["triage", str(hostile.fifo(root / "log.txt")), "--root", str(root)], "not a regular file"),
        (["triage", str(outside / "secret.npz"), "--root", str(root)], "outside the allowed roots"),
        (["triage", str(root / "x"), "--root", str(outside / "missing")], "not a directory"),
    ]
    for argv, expected in cases:
        ran = subprocess.run([sys.executable, "-m", "qnn_debug", *argv, "--json"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        doc = json.loads(ran.stdout)
        assert ran.returncode == 2 and "Traceback" not in ran.stderr, (argv, ran.stderr)
        import re

        assert re.search(expected, doc["message"]) and doc["hint"], (argv, doc)


def test_lone_surrogate_names_from_json_are_stored_as_valid_json(tmp_path: Path) -> None:
    from qnn_debug.runstore import RunRecord, RunWriter, load_run

    writer = RunWriter(tmp_path / "run", RunRecord(role="imported", target="npz", precision="unknown"))
    writer.add_tensor(json.loads('"x\\ud800y"'), np.zeros(2, np.float32))
    writer.finish()
    json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert load_run(tmp_path / "run").names() == ["x\ufffdy"]


def test_an_npz_compare_target_is_bounded_by_the_reference(tmp_path: Path) -> None:
    """A zip bomb given as compare target is refused before anything is decompressed or written."""
    from qnn_debug.compare.importers import import_npz
    from qnn_debug.runstore import RunRecord, RunWriter

    writer = RunWriter(tmp_path / "ref", RunRecord(role="reference", target="ort-cpu", precision="fp32"))
    writer.add_tensor("y", np.zeros((4, 4), np.float32))
    reference = writer.finish()
    bomb = hostile.zip_bomb(tmp_path / "bomb.npz", "y", (16, 1024, 1024))
    with pytest.raises(BadInputError, match="over the limit"):
        import_npz(bomb, reference=reference, out=tmp_path / "imported")
    assert not (tmp_path / "imported").exists()


def _writer(out: Path) -> object:
    from qnn_debug.runstore import ModelInfo, RunRecord, RunWriter

    record = RunRecord(role="target", target="htp-sim", precision="fp16", soc_model=69, htp_arch=79,
                       model=ModelInfo(path="m.onnx", sha256="0" * 64, format="onnx"))
    return RunWriter(out, record)


def test_swapping_a_parent_for_a_link_after_the_claim_cannot_redirect_writes(confined: tuple[Path, Path]) -> None:
    """The claimed run folder is held by a descriptor: a parent replaced by a link to the outside (with a
    ready-made look-alike run folder there) after validation does not move a single write."""
    from qnn_debug.runstore import RunWriter, load_run

    root, outside = confined
    (root / "runs").mkdir()
    writer = _writer(root / "runs" / "r1")
    assert isinstance(writer, RunWriter)
    (outside / "r1" / "tensors").mkdir(parents=True)
    (outside / "r1" / "logs").mkdir()
    before = hostile.snapshot(outside)
    (root / "runs").rename(root / "moved")
    (root / "runs").symlink_to(outside, target_is_directory=True)  # the swap, between validation and use
    writer.add_tensor("x", np.ones((2, 3), np.float32))
    writer.add_tensor("q", np.ones((4,), np.float32), raw=np.ones((4,), np.uint8), scale=0.5, offset=0)
    writer.write_log("worker.log", "ok")
    writer.finish()
    assert hostile.snapshot(outside) == before, "a write was redirected outside the root"
    run = load_run(root / "moved" / "r1")
    assert run.names() == ["x", "q"] and float(run.array("x").sum()) == 6.0
    assert not fs.is_claimed(root / "moved" / "r1")


@pytest.mark.parametrize("sub", ["tensors", "logs"])
def test_a_subfolder_swapped_for_a_link_is_refused_typed(confined: tuple[Path, Path], sub: str) -> None:
    from qnn_debug.runstore import RunWriter

    root, outside = confined
    writer = _writer(root / "r2")
    assert isinstance(writer, RunWriter)
    before = hostile.snapshot(outside)
    (root / "r2" / sub).rmdir()
    (root / "r2" / sub).symlink_to(outside, target_is_directory=True)
    with pytest.raises(BadInputError, match="symbolic link") as err:
        if sub == "tensors":
            writer.add_tensor("x", np.ones((2,), np.float32))
        else:
            writer.write_log("w.log", "text")
    assert err.value.hint
    assert hostile.snapshot(outside) == before


def test_a_final_name_planted_as_a_link_in_a_claimed_folder_is_replaced(confined: tuple[Path, Path]) -> None:
    root, outside = confined
    out = fs.claim_dir(root / "r3")
    (out / "report.json").symlink_to(outside / "secret.txt")
    fs.atomic_write_text(out / "report.json", "{}")
    assert (outside / "secret.txt").read_text() == "SECRET"
    assert not (out / "report.json").is_symlink() and (out / "report.json").read_text() == "{}"
    with pytest.raises(BadInputError, match="already exists"):
        fs.open_new(out / "report.json")
    fs.release_dir(out)
    assert not fs.is_claimed(out)


def test_an_empty_path_is_refused_as_empty_not_read_as_the_working_directory() -> None:
    with pytest.raises(BadInputError, match="no log file path given"):
        fs.check("", what="log file", kind="file")
    cli = subprocess.run([sys.executable, "-m", "qnn_debug", "triage", ""], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and "no log file path given" in cli.stderr and "is a directory" not in cli.stderr
