"""Log triage: name the class of a QNN failure from a log, with evidence, next steps and a playbook.

Signatures live in ``data/triage_signatures.json``; :func:`triage_log` streams logs of any size.
"""

from __future__ import annotations

from .classify import triage_log
from .models import Evidence, Hypothesis, NextStep, TriageResult

__all__ = ["Evidence", "Hypothesis", "NextStep", "TriageResult", "triage_log"]
