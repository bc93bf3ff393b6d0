"""The claims table (playbooks/sources.md) points at words that are really in the skill, every row has a
source, corrected advice does not come back, and the CLI's hints name commands that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import NODEPS_REQUIREMENTS

REPO = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO / "playbooks"
DATA = REPO / "skill" / "qnn_debug" / "data"
TABLE = PLAYBOOKS / "sources.md"
ROW = re.compile(r"^\| (?P<id>[CSA]\d+[a-z]?) \| (?P<claim>.+?) \| (?P<where>.+?) \| (?P<source>.+) \|$")
WHERE = re.compile(r'(?P<file>[\w./-]+): "(?P<words>[^"]+)"')
CITATION = re.compile(r"\.(?:cpp|hpp|h|py|md):\d+|:\d+-\d+|alibaba/MNN(?:#| PR #)\d+|PR #\d+|measured|tests/test_\w+\.py|Makefile")
KNOWLEDGE_FILES = ("qnn_op_knowledge.json", "mnn_optypes.json", "qnn_error_codes.json")


def _flat(text: str) -> str:
    """Markup-free, one-space text: a phrase may wrap lines or sit inside backticks in the file."""
    return " ".join(text.replace("`", "").replace("*", "").split())


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _text_of(name: str) -> str:
    """A "Where" file: playbooks first, then the skill's root (SKILL.md), ``data/`` in the engine."""
    if name.startswith("data/"):
        return _flat(" ".join(_strings(json.loads((DATA / name[5:]).read_text(encoding="utf-8")))))
    for base in (PLAYBOOKS, REPO):
        if (base / name).is_file():
            return _flat((base / name).read_text(encoding="utf-8"))
    raise AssertionError(f"sources.md names {name}, which is neither a playbook nor a file of the skill")


def _rows() -> list[dict[str, str]]:
    lines = [line for line in TABLE.read_text(encoding="utf-8").splitlines()
             if line.startswith("| ") and not line.startswith("| # |")]
    unread = [line for line in lines if not ROW.match(line)]
    assert not unread, f"rows the check cannot read: {unread}"
    rows = [m.groupdict() for line in lines if (m := ROW.match(line))]
    assert len(rows) >= 30, "the table lost its rows"
    return rows


def test_every_row_points_at_words_that_are_there_and_has_a_source() -> None:
    ids = [r["id"] for r in _rows()]
    assert len(ids) == len(set(ids)), "duplicate row ids"
    for row in _rows():
        places = WHERE.findall(row["where"])
        assert places, f"{row['id']}: no file: \"words\" in its Where column"
        for name, words in places:
            assert _flat(words) in _text_of(name), f"{row['id']}: {name} does not say {words!r}"
        assert CITATION.search(row["source"]), f"{row['id']}: no MNN file:line, issue, measurement or test"
        for cited in re.findall(r"tests/[\w/.-]+\.py|Makefile", row["source"]):
            assert (REPO / cited).is_file(), f"{row['id']} cites {cited}, which does not exist"


def test_the_table_is_linked_from_the_playbook_index() -> None:
    assert "(sources.md)" in (PLAYBOOKS / "README.md").read_text(encoding="utf-8")
    assert "(README.md)" in TABLE.read_text(encoding="utf-8")


def test_skill_installs_the_mnn_wheel_the_project_is_tested_with() -> None:
    pinned = re.search(r"^MNN==([\d.]+)$", NODEPS_REQUIREMENTS.read_text(encoding="utf-8"), re.M)
    assert pinned is not None
    skill = (REPO / "SKILL.md").read_text(encoding="utf-8")
    assert f"pip install --no-deps MNN=={pinned.group(1)}" in skill
    assert set(re.findall(r"MNN==([\d.]+)", skill)) == {pinned.group(1)}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert set(re.findall(r"MNN==([\d.]+)", readme)) == {pinned.group(1)}


def _sentences() -> list[tuple[str, str]]:
    texts = {p.name: _flat(p.read_text(encoding="utf-8")) for p in [REPO / "SKILL.md", *PLAYBOOKS.glob("*.md")]
             if p.name != "sources.md"}
    texts.update({n: _flat(" ".join(_strings(json.loads((DATA / n).read_text(encoding="utf-8")))))
                  for n in KNOWLEDGE_FILES})
    return [(name, s) for name, text in texts.items() for s in re.split(r"(?<=[.;:])\s+", text)]


NEGATION = re.compile(r"\bnot\b|\bNOT\b|\bno\b|\bnever\b|instead|does not help|\bnor\b", re.I)
OLD_ADVICE = {
    "slice ranges blamed for #4716": re.compile(r"4716.*(?:begin/end|ranges)|(?:begin/end|ranges).*4716"),
    "precision High as an fp32 path": re.compile(r"precision\W*(?:=\s*)?High\b.*\bfp32|\bfp32\b.*precision\W*High\b", re.I),
    "chunk_size and the graph count": re.compile(
        r"chunk_size\b.*\b(?:changes|sets|controls|decides)\b.*\b(?:number|count)\b|chunks? means? more graphs"),
    "Gather/Rotary keep float": re.compile(r"(?:Gather|Rotary).*keep\w* float", re.I),
    "broadcast error as noise": re.compile(r"Broad cast error.*\bnoise\b|\bnoise\b.*Broad cast error"),
}


@pytest.mark.parametrize("advice", sorted(OLD_ADVICE))
def test_corrected_advice_is_only_ever_stated_as_wrong(advice: str) -> None:
    """Each old claim may still be named (to say it is wrong) but never asserted: a sentence that mentions
    it also carries a negation."""
    pattern = OLD_ADVICE[advice]
    asserted = [(name, s) for name, s in _sentences() if pattern.search(s) and not NEGATION.search(s)]
    assert not asserted, asserted


def test_the_detector_catches_the_old_wordings() -> None:
    old = {"slice ranges blamed for #4716": "begin/end/stride are read without null checks, the path of the #4716 crash",
           "precision High as an fp32 path": "use precision=High to run the graph in fp32",
           "chunk_size and the graph count": "--chunk_size sets the prefill graph size; more chunks mean more graphs",
           "Gather/Rotary keep float": "Gather/Rotary inputs keep float activations",
           "broadcast error as noise": "Is it the known LLM-export noise? Broad cast error, dim1 = 4, dim2 = 0"}
    for advice, sentence in old.items():
        assert OLD_ADVICE[advice].search(sentence) and not NEGATION.search(sentence), advice


def test_the_1002_row_of_the_skill_says_where_offline_1002_comes_from() -> None:
    row = next(line for line in (REPO / "SKILL.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `error code 1002`"))
    assert "offline" in row and "memRegister" in row


@pytest.mark.parametrize(("argv", "command"), [(["op", ""], "op"), (["probe", "--serial", ""], "probe")])
def test_a_bad_flag_points_at_the_command_as_typed(argv: list[str], command: str) -> None:
    """``op`` runs the ``op_lookup`` operation and ``probe`` runs ``probe_device``: the hint must name the
    command the user can type, not the operation."""
    res = CliRunner().invoke(app, [*argv, "--json"])
    assert res.exit_code == 2
    assert json.loads(res.stdout)["hint"] == f"see qnn-debug {command} --help"


def test_stridedslice_facts_put_the_4716_crash_on_the_data_input() -> None:
    from qnn_debug.ops import lookup_op_constraints

    notes = " ".join(m.notes or "" for m in lookup_op_constraints("StridedSlice").mnn)
    assert "data input" in notes and "does not help" in notes
    rope = " ".join(f.text for f in lookup_op_constraints(306).facts)
    assert "#4716" in rope and "re-export" in rope


def test_top_level_help_names_the_global_root_option() -> None:
    """SKILL.md says the CLI takes ``--root``; a reader of ``qnn-debug --help`` must find it there too."""
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0 and "--root DIR" in " ".join(res.stdout.split())
