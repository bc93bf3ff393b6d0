"""Verdict rules as plugins: the ordered rule book, and the three calls the pipeline makes on it.

``decide`` asks each rule in order for a decision; ``verdict`` words it with the deciding rule's sentence;
``next_steps`` asks the rules which of them produced a finished result. Adding a verdict is one
:class:`VerdictRule` registered with ``RULES.register(rule, before=...)``.
"""

from __future__ import annotations

from ...next_step import NextStep
from .. import wording
from ..schema import CompareResult, Verdict
from ..thresholds import Thresholds
from ..verdict import Context, Decision, Findings, context
from .base import RuleBook, VerdictRule
from .builtin import BUILTIN

__all__ = ["RULES", "Context", "Decision", "Findings", "RuleBook", "VerdictRule", "decide", "next_steps", "verdict"]

RULES = RuleBook(BUILTIN)


def decide(found: Findings, th: Thresholds) -> Decision:
    """The first rule that holds decides; it names itself in ``Decision.rule``."""
    ctx = context(found, th)
    for rule in RULES:
        d = rule.decide(found, th, ctx)
        if d is not None:
            d.rule = rule.name
            return rule.finish(d, found, th, ctx)
    raise AssertionError("no verdict rule decided: the last rule of the book always decides")


def verdict(d: Decision, found: Findings, th: Thresholds) -> Verdict:
    """The public verdict, summarised by the sentence of the rule that decided."""
    return wording.verdict(d, found, th, RULES.named(d.rule).sentence(d, found, th))


def next_steps(r: CompareResult) -> list[NextStep]:
    """The steps for ``r``'s verdict, most useful first; none for a healthy run."""
    for rule in RULES:
        steps = rule.next_steps(r)
        if steps is not None:
            return steps
    return []
