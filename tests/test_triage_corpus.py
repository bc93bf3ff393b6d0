"""Triage accuracy on real logs from public MNN / ONNX Runtime / ExecuTorch / QNN SDK issues, in-sample and held-out."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triage_accuracy
from qnn_debug.triage import triage_log
from qnn_debug.triage.models import TriageResult
from qnn_debug.triage.signatures import CATEGORIES
from triage_accuracy import CORPUS, GOAL_HELDOUT, HELDOUT, evaluate, skill_step_top1, top1

# Regression floor only, set AFTER the single measurement of the current held-out set, never above it; None while a
# new set has not been measured yet (the test then skips, so that no run shows the held-out figure before the round's
# changes are done). Round 8 measured 80/118 = 67.8% (80/118 before the round too): five more misses fail the test.
# Earlier rounds, now in-sample: round 7 measured 70/111 = 63.1%, round 6 58/86 = 67.4%, round 5 47/72 = 65.3%,
# round 4 29/41 = 70.7%, round 3 10/29 = 34.5%.
HELDOUT_FLOOR: float | None = 0.64


def test_corpus_is_real_and_large_enough() -> None:
    manifest = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
    public = [c for c in manifest["cases"] if c["origin"] == "public issue"]
    assert len(public) >= 25
    for case in manifest["cases"]:
        assert (CORPUS / case["file"]).stat().st_size > 0
        assert case["expected"] in CATEGORIES
        if case["origin"] == "public issue":
            assert case["source"].startswith("https://github.com/")
    assert len({c["expected"] for c in manifest["cases"]}) >= 14, "the corpus must cover (almost) every category"


def test_heldout_part_is_separate_real_and_a_fifth() -> None:
    inside = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))["cases"]
    held = json.loads((HELDOUT / "manifest.json").read_text(encoding="utf-8"))["cases"]
    assert len(inside) + len(held) >= 80
    assert len(held) >= (len(inside) + len(held)) // 5
    assert not {c["id"] for c in inside} & {c["id"] for c in held}
    for case in held:
        assert (HELDOUT / case["file"]).stat().st_size > 0 and not (CORPUS / case["file"]).exists()
        assert case["expected"] in CATEGORIES and case["source"].startswith("https://")
        if "second_reader" in case:
            assert case["second_reader"]["label"] in CATEGORIES and isinstance(case["second_reader"]["sure"], bool)
        if "assistant" in case:
            _assert_reading_is_grounded(case["assistant"], (HELDOUT / case["file"]).read_text(encoding="utf-8", errors="replace"))


def _squash(text: str) -> str:
    return " ".join(text.split())


def _assert_reading_is_grounded(reading: dict[str, object], log: str) -> None:
    """A recorded assistant step holds triage's answer and the reader's category, and the reading quotes the line or
    words that decide it, verbatim from the log (whitespace aside): a label with no line behind it is not a reading."""
    assert reading["triage"] in CATEGORIES and reading["reading"] in CATEGORIES
    assert isinstance(reading["low_confidence"], bool) and isinstance(reading["sure"], bool)
    quote = str(reading.get("quote") or "")
    assert quote.strip(), reading
    assert _squash(quote) in _squash(log), f"the quoted line is not in the log: {quote!r}"


def test_grounding_check_refuses_a_quote_the_log_lacks() -> None:
    log = "QnnDsp <E> graph prepare failed 1002\n  at step 3"
    step = {"triage": "other", "low_confidence": True, "reading": "finalize_failed_1002", "sure": True}
    _assert_reading_is_grounded({**step, "quote": "graph prepare   failed 1002"}, log)
    with pytest.raises(AssertionError):
        _assert_reading_is_grounded({**step, "quote": "graph finalize failed"}, log)
    with pytest.raises(AssertionError):
        _assert_reading_is_grounded({**step, "reading": "not_a_category", "quote": "failed 1002"}, log)


def test_heldout_top1_stays_above_its_floor(capsys: pytest.CaptureFixture[str]) -> None:
    if HELDOUT_FLOOR is None:
        pytest.skip("the current held-out set has not been measured yet")
    results = evaluate(HELDOUT)
    step = skill_step_top1(results)
    with capsys.disabled():
        print(f"\ntriage held-out top-1: {top1(results):.1%} of {len(results)}; the skill's triage step: "
              + (f"{step:.1%}" if step is not None else "not recorded"))
    assert top1(results) >= HELDOUT_FLOOR
    # The skill's triage step (triage where it is sure, the recorded reading by the rule book where it is not) is
    # scored with the engine as it is now: an engine that grows sure and wrong on these logs fails here (109/118 =
    # 92.4% when measured; three more misses fail the goal).
    assert step is not None and step >= GOAL_HELDOUT


def test_top1_accuracy_and_every_answer_has_evidence_and_next_step(capsys: pytest.CaptureFixture[str]) -> None:
    results = evaluate()
    hits = sum(r.got == r.expected for r in results)
    with capsys.disabled():
        print(f"\ntriage top-1 accuracy: {hits}/{len(results)} = {hits / len(results):.1%}")
    assert hits / len(results) >= 0.85, [r for r in results if r.got != r.expected]
    for r in results:
        assert r.evidence > 0 and r.next_steps > 0, r


def test_stripped_signal_gives_other_not_a_guess() -> None:
    """A log without any failure line must not be forced into a failure category."""
    r = triage_log(text="Test convert_cache.mnn from input info: onnx\nRun for 0 time\nWrite y output to output/0_0.txt\n")
    assert r.category == "other"
    assert r.evidence and r.next_steps


def test_cross_rounds_reads_only_the_in_sample_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``--cross-rounds`` measures the similar-threads layer without the held-out part (it must not even exist)."""
    monkeypatch.setattr(triage_accuracy, "HELDOUT", tmp_path / "absent")
    assert triage_accuracy.main(["--cross-rounds"]) == 0
    out = capsys.readouterr().out
    for line in ("leave one round out", "round 4", "leave one source repository out", "all repositories"):
        assert line in out
    assert "layer alone" in out and "rules+layer" in out


def test_skill_step_takes_triage_when_sure_and_the_reading_when_unsure() -> None:
    """The step's answer is triage's where it was sure and the reader's where it was not; the reading alone is scored
    on every log."""
    sure = triage_log(text="QnnDsp <E> graphFinalize failed with error 1002\n")
    unsure = triage_log(text="the app stops when I load the model on the NPU\n")
    assert not sure.low_confidence and sure.category == "finalize_failed_1002" and unsure.low_confidence

    def case(case_id: str, expected: str, reading: str, r: TriageResult) -> triage_accuracy.CaseResult:
        step = {"triage": r.category, "low_confidence": r.low_confidence, "reading": reading}
        return triage_accuracy._case_result({"id": case_id, "expected": expected, "assistant": step}, r)

    results = [
        case("a", "finalize_failed_1002", "other", sure),
        case("b", "vtcm_or_memory", "vtcm_or_memory", unsure),
        case("c", "build_error", "other", unsure),
    ]
    line = triage_accuracy._skill_step(results)
    assert line is not None
    assert "blind to the labels): 2/3 = 66.7%" in line
    assert "read by the rule book: 2, right 1/2" in line and "its answer kept: 1, right 1/1" in line
    assert "the reading alone on every log 1/3" in line
    assert triage_accuracy._skill_step(results[:0]) is None
