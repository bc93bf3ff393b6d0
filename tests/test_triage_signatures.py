"""The signature data file checks itself: examples match, anchors gate the patterns, playbook links resolve."""

from __future__ import annotations

import re
from pathlib import Path

from qnn_debug.triage.signatures import CATEGORIES, load_signatures

REPO = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO / "playbooks"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", md.read_text(encoding="utf-8"), re.MULTILINE)}


def test_every_signature_matches_its_own_example_and_its_anchor_gates_it() -> None:
    db = load_signatures()
    for sig in db.signatures:
        assert sig.regex.search(sig.example), sig.id
        if not sig.needs_non_ascii and not sig.head_only:
            assert any(a in sig.example for a in sig.anchors), sig.id
        if sig.before is not None:  # the example's text before the hit satisfies the signature's own context check
            assert any(sig.context_ok(sig.example, m.start()) for m in sig.regex.finditer(sig.example)), sig.id
        assert sig.source and sig.why
    for noise in db.noise:
        assert noise.regex.search(noise.example), noise.id


def test_every_category_has_a_playbook_section_that_exists() -> None:
    db = load_signatures()
    assert set(db.categories) == set(CATEGORIES)
    for name, spec in db.categories.items():
        file, _, anchor = spec.playbook.partition("#")
        md = REPO / file
        assert md.is_file(), (name, file)
        if anchor:
            assert anchor in _anchors(md), (name, anchor)
        assert spec.next_steps


def test_playbooks_link_to_each_other_and_to_tools() -> None:
    tools = {"baseline", "dump_qnn", "compare", "diagnose", "run_on_device", "toggle_shapeMutable",
             "lookup_op_constraints", "triage_log", "list_devices", "probe_device"}
    files = sorted(PLAYBOOKS.glob("*.md"))
    assert {f.name for f in files} >= {"README.md", "error-codes.md", "export-crash.md", "build-config.md",
                                        "wrong-numbers.md", "garbled-llm.md", "add-op.md", "performance.md",
                                        "shape-mutable.md"}
    named = set()
    for md in files:
        text = md.read_text(encoding="utf-8")
        named |= {t for t in tools if f"`{t}`" in text}
        links = re.findall(r"\]\(([\w\-]+\.md)(?:#([\w\-]+))?\)", text)
        if md.name != "README.md":
            assert ("README.md", "") in links, f"{md.name} must link back to the index"
        for target, anchor in links:
            assert (PLAYBOOKS / target).is_file(), (md.name, target)
            if anchor:
                assert anchor in _anchors(PLAYBOOKS / target), (md.name, target, anchor)
        assert "qnn-debug " in text, md.name
    assert named == tools


def test_playbooks_cover_the_required_items() -> None:
    text = " ".join(p.read_text(encoding="utf-8") for p in PLAYBOOKS.glob("*.md"))
    for item in ("1002", "6000", "6001", "6031", "6033", "1003", "6004", "3110", "0xc26", "7004", "1100",
                 "QnnFloatToHalf", "getTensorIdx", "QNNStridedSlice", "--generate_for_npu", "--max_history_token 0",
                 "Can't Find type=32 backend", "Not registered type", "Failed to open QNN libs", "SDK version",
                 "first failing", "fp16", "quantization", "Rotary", "Gather", "registerQNNOps", "VTCM"):
        assert item in text, item


def test_every_triage_step_runs_as_printed_with_its_variables_explained() -> None:
    """A tool's line has no bare placeholder word: what only the user knows is a quoted "$NAME", and the step's
    `why` says what to set it to."""
    import shlex

    from qnn_debug.triage import triage_log

    db = load_signatures()
    for tool, line in db.tools.items():
        words = shlex.split(line)
        assert words[0] == "qnn-debug", tool
        assert not [w for w in words[1:] if re.fullmatch(r"[A-Z][A-Z_]+", w)], (tool, line)
        for name in re.findall(r'"\$([A-Z_]+)"', line):
            assert name in db.variables, (tool, name)
    result = triage_log(text="QnnDsp <E> graph finalize failed 1002")
    for step in result.next_steps:
        for name in re.findall(r'"\$([A-Z_]+)"', step.cli):
            assert f"set {name} to " in step.why, step


def test_named_context_lists_are_expanded_and_checked() -> None:
    import json

    import pytest
    from pydantic import ValidationError

    from qnn_debug.triage.signatures import DATA_FILE, SignatureDB

    db = load_signatures()
    assert db.contexts and all(not lit.startswith("@") for s in db.signatures for lit in s.requires_any)
    words = next(s for s in db.signatures if s.id == "words-crash-en")
    assert set(db.contexts["npu"]) <= set(words.requires_any)
    raw = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    raw["signatures"][0]["requires_any"] = ["@no-such-list"]
    with pytest.raises(ValidationError, match="unknown context list"):
        SignatureDB.model_validate(raw)
