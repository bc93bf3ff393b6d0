"""The built-in verdict rules, in the order they are asked: each binds a decision of :mod:`..verdict` to its
sentence in :mod:`..wording` and its next steps in :mod:`..steps` / :mod:`..steps_range`."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ...next_step import NextStep
from .. import steps as st
from .. import steps_range as sr
from .. import verdict as v
from .. import wording as w
from ..schema import CompareResult
from ..thresholds import Thresholds
from ..verdict import Context, Decision, Findings
from .base import VerdictRule

Decide = Callable[[Findings, Thresholds, Context], "Decision | None"]
Sentence = Callable[[Decision, Findings, Thresholds], str]


class _Bound(VerdictRule):
    """A rule made of a decision function and a sentence function."""

    _decide: ClassVar[Decide]
    _sentence: ClassVar[Sentence]

    def decide(self, found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
        return type(self)._decide(found, th, ctx)

    def sentence(self, d: Decision, found: Findings, th: Thresholds) -> str:
        return type(self)._sentence(d, found, th)


class _OnInputs(_Bound):
    """The input checks: the error starts before any op, so nothing about the ops is added."""

    def finish(self, d: Decision, found: Findings, th: Thresholds, ctx: Context) -> Decision:
        return d

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        return st.input_not_copied_steps(r) if r.verdict.kind == "input_not_copied" else None


class _OnOps(_Bound):
    """Verdicts about the ops: they carry the worst tensor and the drift note."""

    def finish(self, d: Decision, found: Findings, th: Thresholds, ctx: Context) -> Decision:
        return v.finish_ops(d, found, th, ctx)


class ZeroInput(_OnInputs):
    name = "zero_input"
    _decide, _sentence = v.zero_input, w.zero_input_sentence


class InputMismatch(_OnInputs):
    name = "input_mismatch"
    _decide, _sentence = v.input_mismatch, w.input_mismatch_sentence


class EncodingRange(_Bound):
    name = "encoding_range"
    _decide, _sentence = v.encoding_range, w.encoding_range_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        ev = r.verdict.evidence.get("encoding_range")
        return sr.encoding_range_steps(r, ev) if r.verdict.kind == "quantization" and isinstance(ev, dict) else None


class Fp16Range(_Bound):
    name = "fp16_range"
    _decide, _sentence = v.fp16_range, w.fp16_range_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        ev = r.verdict.evidence.get("fp16_range")
        return sr.fp16_range_steps(r, ev) if r.verdict.kind == "precision" and isinstance(ev, dict) else None


class Bug(_OnOps):
    name = "bug"
    _decide, _sentence = v.bug, w.bug_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        from ..fused_steps import dropped_activation_steps

        return dropped_activation_steps(r, st.real_bug_steps(r)) if r.verdict.kind == "real_bug" else None


class UnconfirmedBug(Bug):
    name = "unconfirmed_bug"
    _decide, _sentence = v.unconfirmed_bug, w.unconfirmed_bug_sentence


class Quantization(_OnOps):
    name = "quantization"
    _decide, _sentence = v.quantization, w.quantization_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        return st.quantization_steps(r) if r.verdict.kind == "quantization" else None


class Undecided(_OnOps):
    """No floor and no re-run: says what is missing; never ``precision`` (it would clear a possible wrong op)."""

    name = "undecided"
    _decide, _sentence = v.undecided, w.undecided_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        return st.undecided_steps(r) if r.verdict.kind == "undecided" else None


class Precision(_OnOps):
    name = "precision"
    _decide, _sentence = v.precision, w.precision_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        return st.precision_steps(r) if r.verdict.kind == "precision" else None


class PoorFloor(Precision):
    name = "poor_floor"
    _decide, _sentence = v.poor_floor, w.poor_floor_sentence


class Healthy(_OnOps):
    """The last rule: it always decides."""

    name = "ok"
    _decide, _sentence = v.healthy, w.ok_sentence

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        return [] if r.verdict.kind == "ok" else None


BUILTIN: list[VerdictRule] = [ZeroInput(), InputMismatch(), EncodingRange(), Fp16Range(), Bug(), UnconfirmedBug(),
                              Quantization(), Undecided(), Precision(), PoorFloor(), Healthy()]
