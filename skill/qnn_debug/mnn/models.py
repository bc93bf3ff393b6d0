"""Plain records of MNN's test tools: a ModuleBasic run's report and a test dir (pydantic only, no numpy).

:mod:`.modulebasic` and :mod:`.testdir` build them and re-export them; result models of the faces use
them without loading the parsers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["passed", "failed", "error", "crashed", "unchecked"]


class OutputCheck(BaseModel):
    """One ``For <name>, max = …, diffmax = …, diff rate = …`` line (one per output per repeat)."""

    name: str
    repeat: int
    shape: list[int] = Field(default_factory=list)
    mnn_max: float  # MNN's running max of the *signed* reference values (from 0)
    diffmax: float
    mnn_diff_rate: float
    mnn_failed: bool = False  # ModuleBasic printed TESTERROR for it


class QnnErrorLine(BaseModel):
    code: int
    source_file: str
    source_line: int
    text: str


class NotRegistered(BaseModel):
    type_id: int
    op: str
    type_name: str | None = None


class ModuleBasicReport(BaseModel):
    """Everything ModuleBasic printed, structured; ``status`` is decided by :func:`judge`."""

    status: Status = "unchecked"
    reason: str = ""
    model: str | None = None
    testdir: str | None = None
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    forward_type: int | None = None
    precision: int | None = None
    checks: list[OutputCheck] = Field(default_factory=list)
    skipped_checks: list[str] = Field(default_factory=list)
    test_errors: list[str] = Field(default_factory=list)
    qnn_errors: list[QnnErrorLine] = Field(default_factory=list)
    graph_execute_failed: int = 0
    graph_finalize_failed: bool = False
    validate_binary_failed: list[int] = Field(default_factory=list)
    missing_backends: list[int] = Field(default_factory=list)
    not_registered: list[NotRegistered] = Field(default_factory=list)
    tensor_usage: list[int] = Field(default_factory=list)
    written: dict[str, list[str]] = Field(default_factory=dict)  # output name → files
    offline_plugin: bool = False
    usage_printed: bool = False
    invalid_json: bool = False
    load_failed: bool = False
    forward_error: bool = False
    load_ms: float | None = None
    avg_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    memory_mb: float | None = None
    returncode: int | None = None
    judged: list[dict[str, float | str | bool | None]] = Field(default_factory=list)


class TestDirInfo(BaseModel):
    """What a test dir declares (and what exists in it)."""

    __test__ = False  # not a pytest test class

    dir: str
    inputs: dict[str, list[int]]
    outputs: list[str]
    shape_mutable: bool | None = None  # None: key absent → ModuleBasic's default (true)
    references: list[str] = Field(default_factory=list)  # outputs that have a reference .txt
    extra_keys: dict[str, Any] = Field(default_factory=dict)


class ToggleResult(BaseModel):
    """Outcome of :func:`toggle_shape_mutable`."""

    file: str
    old: bool | None  # None: the key was absent (ModuleBasic then uses true)
    new: bool
    changed: bool
    backup: str | None = None
