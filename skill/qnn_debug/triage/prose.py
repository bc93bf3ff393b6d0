"""Whether a line that names a crash is a crash line a program printed or the reporter's own sentence.

"Segmentation fault (core dumped)", "段错误 (核心已转储)" (bash in a Chinese locale) and "Fatal signal 11 (SIGSEGV)"
are what a shell or the runtime prints; "Step 2 调用 compilefornpu 时发生段错误" and "compilefornpu segfaults for me"
are what a person writes about a run. Only the former shows that the log itself reached the crash: the latter is
the reporter's words (a hint), and a log that stops without a crash line still needs re-running under stdbuf/gdb.
"""

from __future__ import annotations

import re

# What a program prints around a crash in Chinese (bash's and glibc's translated messages), removed before looking
# for Chinese prose on the line.
_PRINTED_CJK = re.compile(r"段错误|核心已转储|吐核|已放弃|非法指令|总线错误")
_CJK = re.compile(r"[\u3400-\u9fff]")
# A line as a program prints it: a [tag], <level>, a timestamp or pid, "name:" or "Tag/..." first.
_PRINTED_PREFIX = re.compile(r"\s*(?:\[|<|\d|[\w./\-]+(?:\(\s*\d+\))?\s*:|[A-Z]/|\*\*\*|#\d)")
# Words a person uses about a run and a program does not print beside a crash.
_EN_PROSE = re.compile(
    r"(?i)\b(?:i|i'm|i've|my|me|we|our|us|you|it|it's|this|that|there|when(?:ever)?|while|every ?time|always|keeps?"
    r"|still|then|but|because|happens?|gets?|got|seems?|randomly|anyone|any idea|for me|help"
    r"|segfault(?:s|ed|ing)|crash(?:es|ed|ing))\b")


def reads_as_prose(line: str) -> bool:
    """True when the line is a person's sentence about a crash rather than the crash line a program printed."""
    if _CJK.search(_PRINTED_CJK.sub("", line)):
        return True
    if _PRINTED_PREFIX.match(line):
        return False
    return _EN_PROSE.search(line) is not None
