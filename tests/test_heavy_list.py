"""The heavy tier's list (tests/heavy_tests.txt) names tests that exist: a renamed or deleted test would silently
fall back into the default tier, or an entry would mark nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import HEAVY_LIST, REPO, heavy_entries


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_heavy_entry_names_an_existing_test_function() -> None:
    entries = heavy_entries()
    assert len(entries) >= 20, HEAVY_LIST
    for entry in entries:
        m = re.fullmatch(r"(tests/test_\w+\.py)::(test_\w+)(\[.*)?", entry)
        assert m, f"{entry!r} is not a node id or its start"
        path = REPO / m.group(1)
        assert path.is_file(), f"{entry!r}: no file {m.group(1)}"
        assert m.group(2) in _test_functions(path), f"{entry!r}: no test {m.group(2)} in {m.group(1)}"


def test_the_list_reads_comments_and_blank_lines_as_nothing(tmp_path: Path) -> None:
    listed = tmp_path / "heavy.txt"
    listed.write_text("# a comment\n\n  tests/test_x.py::test_y[a-  \n", encoding="utf-8")
    assert heavy_entries(listed) == ["tests/test_x.py::test_y[a-"]
    assert heavy_entries(tmp_path / "missing.txt") == []


def test_the_default_run_leaves_the_heavy_tier_out_and_make_test_heavy_runs_it() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "not heavy" in re.search(r"^addopts = (.*)$", pyproject, re.M).group(1)  # type: ignore[union-attr]
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test-heavy:.*\n\t.*pytest .*-m heavy", make, re.M)
    assert "make test-heavy" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
