"""A verdict rule is a plugin: this file defines one, registers it, and it decides a comparison run through the
public API with its own sentence and next step. Adding a verdict takes this one object and nothing else."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from qnn_debug.api import execute
from qnn_debug.compare.rules import RULES, Context, Decision, Findings, VerdictRule
from qnn_debug.compare.schema import CompareResult
from qnn_debug.compare.thresholds import Thresholds
from qnn_debug.examples import deep_conv_net, small_cnn
from qnn_debug.next_step import NextStep, step


class WatchedOutput(VerdictRule):
    """A run whose graph outputs are all judged: say so for the first one, and how to check it again."""

    name = "watched_output"

    def decide(self, found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
        judged = [n for n in found.outputs if n in found.rows]
        if not judged:
            return None
        return Decision("ok", "none", 0.5, {**ctx.evidence(), "watched_output": judged[0]}, None, self.name)

    def sentence(self, d: Decision, found: Findings, th: Thresholds) -> str:
        out = d.evidence["watched_output"]
        return f"Watched: output {out!r} has SQNR {found.rows[out].metrics['sqnr_db']:.1f} dB."

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        out = r.verdict.evidence.get("watched_output")
        if out is None:
            return None
        return [step("compare", ["compare", r.reference, r.target], f"Compare {out!r} again after the next change.")]


@contextlib.contextmanager
def registered() -> Iterator[None]:
    RULES.register(WatchedOutput(), before="ok")
    try:
        yield
    finally:
        RULES.unregister(WatchedOutput.name)


def _baseline(tmp_path: Path, model: onnx.ModelProto, tag: str) -> Path:
    path = tmp_path / f"{tag}.onnx"
    onnx.save(model, str(path))
    execute("baseline", {"model": str(path), "out": str(tmp_path / tag), "mnn_gate": False})
    return tmp_path / tag


@pytest.mark.parametrize(("tag", "model"), [("cnn", small_cnn(seed=2)), ("deep", deep_conv_net(blocks=3, size=12))])
def test_a_registered_rule_decides_with_its_own_sentence_and_step(tmp_path: Path, tag: str,
                                                                  model: onnx.ModelProto) -> None:
    base = _baseline(tmp_path, model, tag)
    request = {"reference": str(base), "target": str(base / "fp16_floor")}  # the floor against the reference: healthy
    before = execute("compare", request)
    assert isinstance(before, CompareResult)
    assert before.verdict.kind == "ok" and "watched_output" not in before.verdict.evidence and not before.next_steps

    with registered():
        result = execute("compare", request)
    assert isinstance(result, CompareResult)
    out = result.verdict.evidence["watched_output"]
    assert out == model.graph.output[0].name and f"Watched: output {out!r} has SQNR" in result.verdict.summary
    assert [s.why for s in result.next_steps] == [f"Compare {out!r} again after the next change."]
    assert result.next_steps[0].cli.startswith("qnn-debug compare ")

    assert "watched_output" not in RULES.names()  # unregistered: the book is as it was
    assert execute("compare", request).model_dump(exclude={"elapsed_s"}) == before.model_dump(exclude={"elapsed_s"})


def test_the_rule_book_refuses_a_second_rule_of_one_name_and_an_unknown_place() -> None:
    with registered():
        assert RULES.names()[-2:] == ["watched_output", "ok"]
        with pytest.raises(ValueError, match="already registered"):
            RULES.register(WatchedOutput(), before="ok")
    with pytest.raises(KeyError, match="no verdict rule named 'nope'"):
        RULES.register(WatchedOutput(), before="nope")
    assert "watched_output" not in RULES.names()
