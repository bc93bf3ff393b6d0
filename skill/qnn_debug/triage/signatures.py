"""Loads and checks ``data/triage_signatures.json``: the knowledge of triage lives there, not in code.

Each signature is a regex with literal ``anchors`` (a chunk of log text is only searched when one anchor
occurs in it, which keeps a 100 MB log fast), a category, a weight and its source. Noise entries are
blanked out of the text before any signature runs, so known harmless lines never drive an answer.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "triage_signatures.json"
BEFORE_CHARS = 48

CATEGORIES: tuple[str, ...] = (
    "finalize_failed_1002",
    "execute_failed_6000",
    "offline_io_mismatch_1003_6004",
    "op_validation_failed_3110_0xc26",
    "unsupported_op_not_registered",
    "convert_segfault",
    "shape_compute_error",
    "encode_failed",
    "wrong_results_accuracy",
    "garbled_llm_output_quantization",
    "sdk_version_or_lib_mismatch",
    "device_lib_missing_or_load_failure",
    "dump_path_error_7004",
    "vtcm_or_memory",
    "build_error",
    "export_script_error",
    "other",
)


class Signature(BaseModel):
    """One recognisable log line: what it means, how much it weighs, and where that knowledge comes from."""

    id: str
    category: str
    pattern: str
    anchors: list[str]
    weight: float
    why: str
    source: str
    example: str
    requires_any: list[str] = Field(default_factory=list, description="counts only if one of these occurs in the log")
    needs_non_ascii: bool = False
    basis: Literal["signature", "words"] = Field(default="signature", description=(
        "'words' for a family of the reporter's own prose (\"it crashes\", \"乱码\"): a hint, reported as such"))
    prose_is_words: bool = Field(default=False, description=(
        "a hit whose every line is the reporter's sentence (\"compilefornpu 时发生段错误\", \"it segfaults for me\") "
        "rather than a line a program printed is read as their words, not as this signature"))
    head_only: bool = Field(default=False, description=(
        "searched only in the log's first 256 KiB (where a report's prose and a pasted answer are): for the reporter's "
        "words, whose patterns are too costly to run over a 100 MB device log, and for shapes no literal can anchor "
        "(one token repeated); anchors are not used (256 KiB costs less than testing each anchor on every chunk)"))
    code_categories: dict[str, str] = Field(default_factory=dict, description=(
        "the category a stated QNN error code (named group 'code') gives the hit instead of ``category``: one "
        "wording prints several codes (an op refused as invalid, 3110, or because no op package implements it, 4005)"))
    crash: bool = Field(default=False, description=(
        "the line is a crash report: like a crash line of the log's structure, it weighs less after a clear error of "
        "another category (the rule book's rule 1)"))
    prefilter: str | None = Field(default=None, description="cheap regex that must match before the full pattern runs")
    min_value: float | None = Field(default=None, description="named group 'value' must be > this")
    max_value: float | None = Field(default=None, description="named group 'value' must be <= this")
    before: str | None = Field(default=None, description=(
        "regex the text just before a match must satisfy (searched in the preceding BEFORE_CHARS characters, "
        "ending with \\Z). Lets a pattern start with a literal (an error number) and still require its context: "
        "a pattern that starts with a case-insensitive alternation is tried at every position of a 4 MiB chunk"))

    @model_validator(mode="after")
    def _check(self) -> Signature:
        if self.category not in CATEGORIES or not set(self.code_categories.values()) <= set(CATEGORIES):
            raise ValueError(f"signature {self.id}: unknown category {self.category} / {self.code_categories}")
        re.compile(self.pattern)
        if self.before is not None and not self.before.endswith("\\Z"):
            raise ValueError(f"signature {self.id}: 'before' must end with \\Z (it is matched right before the hit)")
        if not self.anchors and not self.needs_non_ascii and not self.head_only:
            raise ValueError(f"signature {self.id}: needs anchors (or needs_non_ascii or head_only)")
        return self

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern, re.MULTILINE)

    @property
    def prefilter_regex(self) -> re.Pattern[str]:
        return _compiled(self.prefilter or "", 0)

    def context_ok(self, text: str, start: int) -> bool:
        """True when the text right before ``start`` satisfies ``before`` (always true without one)."""
        if self.before is None:
            return True
        return _compiled(self.before, 0).search(text[max(0, start - BEFORE_CHARS) : start]) is not None

    def category_for(self, groups: dict[str, str]) -> str:
        """The hit's category: the stated code's where the wording prints codes of different meanings."""
        return self.code_categories.get(groups.get("code", ""), self.category)


class Noise(BaseModel):
    """A known message blanked out before matching (line numbers are kept).

    With ``hint_category`` it is a weak hint rather than noise: it adds ``hint_weight`` to that category
    once (too little to win alone) but never feeds the stronger signatures.
    """

    id: str
    pattern: str
    anchors: list[str]
    why: str
    source: str
    example: str
    hint_category: str | None = None
    hint_weight: float = 0.0

    @model_validator(mode="after")
    def _check(self) -> Noise:
        if self.hint_category is not None and self.hint_category not in CATEGORIES:
            raise ValueError(f"noise {self.id}: unknown hint category {self.hint_category}")
        return self

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern, 0)


class Clue(BaseModel):
    """A line that is not a failure but tells the reader something (a fact), e.g. 'Skip check' = nothing compared."""

    id: str
    pattern: str
    anchors: list[str]
    fact: str
    source: str
    example: str

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern, re.MULTILINE)


class NextStepSpec(BaseModel):
    tool: str
    why: str
    cli: str | None = Field(default=None, description="a concrete command, instead of the tool's generic one")


class CategorySpec(BaseModel):
    title: str
    playbook: str
    next_steps: list[NextStepSpec]


class SignatureDB(BaseModel):
    version: int
    about: str
    min_score: float
    tools: dict[str, str]
    variables: dict[str, str] = Field(default_factory=dict)  # "$NAME" in a tool's line -> what to set it to
    contexts: dict[str, list[str]] = Field(default_factory=dict, description=(
        "named context word lists; '@name' in a signature's requires_any stands for the list"))
    categories: dict[str, CategorySpec]
    noise: list[Noise]
    signatures: list[Signature]
    clues: list[Clue] = Field(default_factory=list)
    words_outrank: list[tuple[str, str, str]] = Field(default_factory=list, description=(
        "[stronger, weaker, why]: where the reporter's words name both, the weaker category's words weigh half "
        "(the words of the cause, or of the narrower class, decide)"))

    @model_validator(mode="after")
    def _check(self) -> SignatureDB:
        missing = set(CATEGORIES) - set(self.categories)
        if missing:
            raise ValueError(f"categories without a playbook entry: {sorted(missing)}")
        unknown_pair = {c for pair in self.words_outrank for c in pair[:2]} - set(CATEGORIES)
        if unknown_pair:
            raise ValueError(f"words_outrank names unknown categories: {sorted(unknown_pair)}")
        for spec in self.categories.values():
            for step in spec.next_steps:
                if step.tool not in self.tools:
                    raise ValueError(f"next step names unknown tool {step.tool}")
        for sig in self.signatures:
            if any(lit.startswith("@") for lit in sig.requires_any):
                unknown = [lit for lit in sig.requires_any if lit.startswith("@") and lit[1:] not in self.contexts]
                if unknown:
                    raise ValueError(f"signature {sig.id}: unknown context list {unknown[0]}")
                sig.requires_any = list(dict.fromkeys(
                    word for lit in sig.requires_any for word in (self.contexts[lit[1:]] if lit.startswith("@") else [lit])))
        ids = [s.id for s in self.signatures] + [n.id for n in self.noise] + [c.id for c in self.clues]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate signature ids")
        return self


@cache
def _compiled(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


@cache
def load_signatures(path: Path = DATA_FILE) -> SignatureDB:
    """Parse and validate the signature file once per process."""
    return SignatureDB.model_validate(json.loads(path.read_text(encoding="utf-8")))
