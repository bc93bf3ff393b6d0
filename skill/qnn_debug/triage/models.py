"""Pydantic result of ``triage_log``: the JSON document of ``qnn-debug triage --json`` and the MCP tool."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..next_step import NextStep
from .backtrace import Frame
from .cases import KnownCase
from .commands import CommandLine

__all__ = ["Evidence", "Hypothesis", "KnownCase", "NextStep", "NoiseHit", "TriageResult", "TriageStats"]


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
    playbook: str
    hypotheses: list[Hypothesis]
    evidence: list[Evidence]
    next_steps: list[NextStep]
    facts: list[str] = Field(default_factory=list, description="decoded OpType numbers, QNN error codes, named nodes")
    known_cases: list[KnownCase] = Field(default_factory=list, description="past solved cases (cases file) whose text occurs in this log")
    frames: list[Frame] = Field(default_factory=list, description="backtrace frames found in the log (gdb, lldb, tombstone)")
    commands: list[CommandLine] = Field(default_factory=list, description="export/convert command lines found in the log")
    noise: list[NoiseHit] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    stats: TriageStats
