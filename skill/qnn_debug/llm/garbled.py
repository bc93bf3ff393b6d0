"""Is a generated text garbled? Signals that broken NPU numerics leave in LLM output.

What broken generation looks like in public MNN reports: letters of unrelated scripts inside one word
(Latin + Cyrillic + Arabic + kana), one character repeated for a whole line (``!!!!``, ``''''``, ``يييي``),
invalid UTF-8 shown as U+FFFD, a short piece looping, reserved/special tokens in the text. Normal text in
any one language, Chinese or Japanese mixed with English terms, markdown rules (``---``) and ellipses pass.
Each signal is a decision on its own; the report lists the ones that fired, with the evidence.
"""

from __future__ import annotations

import re
import unicodedata

from pydantic import BaseModel, Field

# script families: CJK covers Han + kana + Hangul (Japanese and Korean text mix them normally)
_FAMILIES = (
    ("CJK", ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO", "IDEOGRAPHIC")),
    ("Cyrillic", ("CYRILLIC",)),
    ("Arabic", ("ARABIC",)),
    ("Hebrew", ("HEBREW",)),
    ("Greek", ("GREEK",)),
    ("Devanagari", ("DEVANAGARI",)),
    ("Thai", ("THAI",)),
    ("Latin", ("LATIN",)),
)
_SHORT_RUN_PUNCT = set("!?,;:'\"\\|/^<>(){}[]")  # four in a row is already not prose
_LONG_RUN_PUNCT = set(".-=*_#~`+")  # markdown rules and ellipses are normal
_REPLACEMENT = ("\ufffd", "\u2592")
_SPECIAL = re.compile(r"<\|[a-z_]*(?:reserved|endoftext|im_start|im_end|extra)[a-z_0-9]*\|>")


class GarbledReport(BaseModel):
    garbled: bool
    reasons: list[str] = Field(default_factory=list)
    scripts: dict[str, int] = Field(default_factory=dict)
    longest_run: str = ""
    characters: int = 0


def _family(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "Other"
    for fam, keys in _FAMILIES:
        if any(name.startswith(k) or f" {k}" in name[:20] for k in keys):
            return fam
    return "Other"


def _longest_run(text: str) -> tuple[str, int]:
    best, n, prev, cur = "", 0, "", 0
    for ch in text:
        cur = cur + 1 if ch == prev else 1
        prev = ch
        if cur > n and not ch.isspace():
            best, n = ch, cur
    return best, n


def _run_limit(ch: str) -> int:
    if ch in _SHORT_RUN_PUNCT:
        return 4
    if ch in _LONG_RUN_PUNCT:
        return 16
    if ch.isdigit():
        return 12
    if ch.isalpha():
        return 6
    return 6  # other symbols


def _looping_piece(text: str) -> tuple[str, int] | None:
    """A piece of 2–12 characters repeated back to back at least 6 times (≥ 24 characters in all)."""
    compact = re.sub(r"\s+", " ", text)
    for size in range(2, 13):
        m = re.search(r"(.{" + str(size) + r"})\1{5,}", compact)
        if m and len(m.group(0)) >= 24 and len(set(m.group(1).strip())) > 1:
            return m.group(1), len(m.group(0)) // size
    return None


def _mixed_words(text: str) -> list[str]:
    """Whitespace-separated words holding letters of two or more families (CJK next to Latin excepted)."""
    out = []
    for word in text.split():
        fams = {f for ch in word if (f := _family(ch)) is not None}
        fams.discard("Other")
        if len(fams) >= 2 and not fams <= {"CJK", "Latin"}:
            out.append(word)
    return out


def detect_garbled(text: str) -> GarbledReport:
    """Garbled-text signals of one generated text (empty text is reported as not garbled)."""
    reasons: list[str] = []
    scripts: dict[str, int] = {}
    for ch in text:
        fam = _family(ch)
        if fam is not None:
            scripts[fam] = scripts.get(fam, 0) + 1
    bad = sum(text.count(c) for c in _REPLACEMENT)
    if bad:
        reasons.append(f"{bad} replacement character(s) (U+FFFD/U+2592): the decoder produced invalid UTF-8")
    ch, n = _longest_run(text)
    if ch and n >= _run_limit(ch):
        reasons.append(f"{ch!r} repeated {n} times in a row")
    loop = _looping_piece(text)
    if loop:
        reasons.append(f"{loop[0]!r} repeated {loop[1]} times back to back")
    mixed = _mixed_words(text)
    words = max(1, len(text.split()))
    if len(mixed) >= 2 or (mixed and words <= 8):
        reasons.append(f"{len(mixed)} word(s) mix letters of unrelated scripts, e.g. {mixed[0]!r}")
    letters = sum(scripts.values())
    big = sorted(f for f, k in scripts.items() if k >= max(2, 0.03 * letters))
    if len(big) >= 3:
        reasons.append(f"letters of {len(big)} script families: {', '.join(big)}")
    special = _SPECIAL.findall(text)
    if len(special) >= 2:
        reasons.append(f"{len(special)} special/reserved tokens inside the text, e.g. {special[0]}")
    return GarbledReport(garbled=bool(reasons), reasons=reasons, scripts=scripts,
                         longest_run=ch * min(n, 8), characters=len(text))
