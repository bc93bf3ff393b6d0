"""Pydantic result of ``triage_log``: the JSON document of ``qnn-debug triage --json`` and the MCP tool."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..next_step import NextStep
from .backtrace import Frame
from .cases import KnownCase
from .commands import CommandLine
from .similar import SimilarOpinion, SimilarThread

__all__ = ["Basis", "Evidence", "Hypothesis", "KnownCase", "NextStep", "NoiseHit", "SimilarOpinion", "SimilarThread",
           "TriageResult", "TriageStats"]


# What decided the category: a known log wording (signature, known backtrace frame, past case), only the reporter's
# own words (prose families), only the log's structure (a QNN status, the object that failed, a crash, a log that
# stops), only the labelled public threads the log resembles, or nothing at all.
Basis = Literal["signature", "words", "structure", "similar", "none"]


class Evidence(BaseModel):
    """A log line that matched a signature (1-based line number in the original file)."""

    line: int
    text: str
    signature: str
    category: str


class Hypothesis(BaseModel):
    category: str
    title: str
    score: float
    why: list[str] = Field(default_factory=list)
    playbook: str


class NoiseHit(BaseModel):
    """A known harmless message that was seen and ignored."""

    id: str
    count: int
    first_line: int
    why: str


class TriageStats(BaseModel):
    lines: int
    bytes: int
    seconds: float
    undecodable_fraction: float


class TriageResult(BaseModel):
    source: str
    category: str
    title: str
    confidence: float = Field(ge=0, le=1)
    basis: Basis = Field(description=(
        "what decided the category: 'signature' (a known log wording, backtrace frame or past case), 'words' (only the "
        "reporter's own words, e.g. 'it crashes', '乱码'), 'structure' (only the log's grammar: a QNN status, the object "
        "that failed, a crash, a log that stops), 'similar' (only labelled public threads the log resembles) or 'none' "
        "(nothing names a failure)"))
    low_confidence: bool = Field(description="true when the answer is a lead to check, not a diagnosis (see low_confidence_reason)")
    low_confidence_reason: str | None = Field(default=None, description="why the answer is low confidence and what would settle it")
    playbook: str
    hypotheses: list[Hypothesis]
    evidence: list[Evidence]
    next_steps: list[NextStep]
    facts: list[str] = Field(default_factory=list, description="decoded OpType numbers, QNN error codes, named nodes")
    known_cases: list[KnownCase] = Field(default_factory=list, description="past solved cases (cases file) whose text occurs in this log")
    similar: SimilarOpinion = Field(default_factory=SimilarOpinion, description=(
        "labelled public threads whose logs resemble this one (URL, category, similarity, shared terms) and the "
        "category they lean to; it gives the category only where no rule names a failure (decided=true)"))
    frames: list[Frame] = Field(default_factory=list, description="backtrace frames found in the log (gdb, lldb, tombstone)")
    commands: list[CommandLine] = Field(default_factory=list, description="export/convert command lines found in the log")
    noise: list[NoiseHit] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    stats: TriageStats
