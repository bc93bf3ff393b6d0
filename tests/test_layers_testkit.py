"""The product never imports the test kit: ``product-without-testkit`` in pyproject.toml is wired and enforced.

On a copy of the tree (never the real one), an ``import qnn_debug_testkit`` planted in a product module makes
``lint-imports`` fail on that contract, whether the import sits at module level, inside a function, or in the
MCP server; the unplanted copy passes it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACT = "the product never imports the test kit"


def _copy(dst: Path) -> Path:
    for part in ("skill", "server", "testkit"):
        shutil.copytree(REPO / part, dst / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", dst / "pyproject.toml")
    return dst


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(cwd / p) for p in ("skill", "server", "testkit"))
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=cwd, env=dict(os.environ, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=180)


def _verdict(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(CONTRACT)]
    assert lines, stdout
    return lines[0]


@pytest.fixture(scope="module")
def lint_imports() -> Path:
    if not LINT_IMPORTS.exists():
        pytest.fail("lint-imports is missing: `make setup` installs import-linter with the dev extras")
    return LINT_IMPORTS


def test_the_unplanted_copy_keeps_the_contract(lint_imports: Path, tmp_path: Path) -> None:
    proc = _lint(_copy(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "KEPT" in _verdict(proc.stdout)


@pytest.mark.parametrize(("module", "planted"), [
    ("skill/qnn_debug/llm/check.py", "import qnn_debug_testkit  # noqa\n"),
    ("skill/qnn_debug/localise/blocks.py", "def _planted() -> None:\n    from qnn_debug_testkit import tiny  # noqa\n"),
    ("server/qnn_debug_mcp/__main__.py", "from qnn_debug_testkit import vl  # noqa\n"),
])
def test_a_planted_testkit_import_breaks_the_contract(lint_imports: Path, tmp_path: Path, module: str,
                                                       planted: str) -> None:
    root = _copy(tmp_path)
    victim = root / module
    victim.write_text(victim.read_text(encoding="utf-8") + "\n\n" + planted, encoding="utf-8")
    proc = _lint(root)
    assert proc.returncode != 0, proc.stdout
    verdict = _verdict(proc.stdout)
    assert "BROKEN" in verdict, proc.stdout
    assert "qnn_debug_testkit" in proc.stdout
    assert (REPO / module).read_text(encoding="utf-8").find("qnn_debug_testkit") == -1  # the real tree is untouched
