"""A verdict rule is one object: its decision, its sentence and its next steps; the rule book keeps them in order.

The first rule whose :meth:`VerdictRule.decide` returns a decision gives the verdict; the summary is that rule's
:meth:`~VerdictRule.sentence`, and the next steps of a finished result come from the first rule whose
:meth:`~VerdictRule.next_steps` claims it (next steps are derived from the stored result alone, so a rule
recognises its verdicts by kind and evidence).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar

from ...next_step import NextStep
from ..schema import CompareResult
from ..thresholds import Thresholds
from ..verdict import Context, Decision, Findings, discount_uncompared


class VerdictRule(ABC):
    """One verdict: when it holds, what the summary says, what to run next."""

    name: ClassVar[str]  # unique; recorded as ``Decision.rule``

    @abstractmethod
    def decide(self, found: Findings, th: Thresholds, ctx: Context) -> Decision | None:
        """The decision when this rule's case holds, else None (the next rule is asked)."""

    @abstractmethod
    def sentence(self, d: Decision, found: Findings, th: Thresholds) -> str:
        """The summary sentence of a decision this rule made, with its numbers."""

    def finish(self, d: Decision, found: Findings, th: Thresholds, ctx: Context) -> Decision:
        """After deciding: a verdict that did not see every tensor must not claim an absence with full confidence."""
        return discount_uncompared(d, found)

    def next_steps(self, r: CompareResult) -> list[NextStep] | None:
        """The steps for a finished result this rule's verdict produced, or None when it is not this rule's."""
        return None


class RuleBook:
    """The verdict rules in the order they are asked; the last one always decides."""

    def __init__(self, rules: Iterable[VerdictRule]) -> None:
        self._rules = list(rules)

    def __iter__(self) -> Iterator[VerdictRule]:
        return iter(list(self._rules))

    def names(self) -> list[str]:
        return [r.name for r in self._rules]

    def named(self, name: str) -> VerdictRule:
        for r in self._rules:
            if r.name == name:
                return r
        raise KeyError(f"no verdict rule named {name!r}; rules: {', '.join(self.names())}")

    def register(self, rule: VerdictRule, *, before: str) -> None:
        """Add ``rule`` so that it is asked just before the rule named ``before`` (e.g. ``"ok"``)."""
        if rule.name in self.names():
            raise ValueError(f"a verdict rule named {rule.name!r} is already registered")
        self._rules.insert(self.names().index(self.named(before).name), rule)

    def unregister(self, name: str) -> None:
        self._rules.remove(self.named(name))
