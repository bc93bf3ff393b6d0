"""The layer contracts in pyproject.toml hold, no import cycle exists, and a change that breaks either is caught.

``make test`` runs ``lint-imports`` itself; this test runs it too so that a plain pytest run (the check
before landing a change) sees a broken layer, and proves on a copy of the packages that the contracts
are wired: one upward import makes ``lint-imports`` fail and name the contract. Cycles are checked on the
module graph of every import, function-level ones included (``import_graph.py``): a contract forbids only
upward edges, so two modules of one layer could otherwise import each other behind a function-level import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from import_graph import cycles, module_graph

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd / "skill"), str(cwd / "server")]))
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def lint_imports() -> Path:
    if not LINT_IMPORTS.exists():
        pytest.fail("lint-imports is missing: `make setup` installs import-linter with the dev extras")
    return LINT_IMPORTS


def test_the_layer_contracts_hold(lint_imports: Path) -> None:
    proc = _lint(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("runstore.py", "import qnn_debug.compare.pipeline", "faces -> engine operations"),
    ("targets/ort_cpu.py", "from qnn_debug.compare import verdict", "targets and devices do not import compare"),
    ("errors.py", "import qnn_debug_mcp", "the engine never imports the MCP server"),
    ("compare/metrics/stats.py", "from qnn_debug import runstore", "the metric kernel imports nothing"),
])
def test_an_upward_import_breaks_a_contract(lint_imports: Path, tmp_path: Path, module: str, line: str,
                                            contract: str) -> None:
    for part in ("skill", "server"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    victim = tmp_path / "skill" / "qnn_debug" / module
    victim.write_text(victim.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    proc = _lint(tmp_path)
    assert proc.returncode != 0, proc.stdout
    verdicts = [ln for ln in proc.stdout.splitlines() if ln.startswith(contract)]
    assert verdicts and "BROKEN" in verdicts[0], proc.stdout


def test_no_import_cycle_even_through_function_level_imports() -> None:
    graph = module_graph(REPO)
    assert len(graph) > 150 and "qnn_debug.localise.blocks_mnn" in graph["qnn_debug.localise.blocks"]
    assert cycles(graph) == []


def test_a_cycle_behind_a_function_level_import_is_caught(lint_imports: Path, tmp_path: Path) -> None:
    """rows → input_checks → fmt exists; fmt importing rows inside a function closes a cycle that no layer
    contract forbids (both are compare), so lint-imports still passes and only the cycle check fails."""
    for part in ("skill", "server"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    victim = tmp_path / "skill" / "qnn_debug" / "compare" / "fmt.py"
    victim.write_text(victim.read_text(encoding="utf-8") + "\n\ndef _planted() -> None:\n    from . import rows  # noqa\n",
                      encoding="utf-8")
    assert _lint(tmp_path).returncode == 0
    found = cycles(module_graph(tmp_path))
    assert len(found) == 1 and {"qnn_debug.compare.fmt", "qnn_debug.compare.rows"} <= set(found[0]), found
