"""Every tuned limit and weight triage decides with, in one table (the labelling rule book says what they serve).

Limits bound memory and output on logs of any size; factors are the weight a vote keeps once a rule of the book
(``playbooks/triage-labels.md``) says it counts for less; confidences cap how sure an answer on a weak basis may be.
Weights read from the data files (signatures, structure rules, similar-threads policy, past-case boost) live there.
"""

from __future__ import annotations

# --- limits: memory and output stay bounded on a log of any size
CHUNK_BYTES = 4 << 20  # a log is read in chunks of this size (cut again at newlines)
MAX_LINE_BYTES = 1 << 20  # a line longer than this is cut (no newline in sight)
HEAD_CHARS = 256 * 1024  # head_only signatures (the reporter's prose, a pasted answer) read only this much of the log
MAX_COUNTED_MATCHES = 10_000  # matches of one signature counted per chunk
MAX_EVIDENCE_PER_SIGNATURE = 3
MAX_EVIDENCE = 30  # evidence rows in the result
EVIDENCE_TEXT_CHARS = 300  # characters kept of an evidence line
MAX_COMMANDS = 20  # export/convert command lines kept
MAX_GENERIC_LINES = 5  # generic error/failed lines kept (evidence when nothing else matched)
MAX_CALL_SITES = 8  # MNN "Error in file ..., line N" call sites named
MAX_FRAMES = 64  # backtrace frames parsed
MAX_FRAMES_SHOWN = 32  # backtrace frames in the result
TAIL_LINES = 5  # last non-blank lines kept (evidence of last resort; does the export log end cleanly?)
TAIL_CHARS = 65536  # the tail lines are looked for in the last this many characters of a chunk
MAX_HYPOTHESES = 5
MAX_OP_STEPS = 3  # `qnn-debug op` next steps at most

# --- vote weights and the rule book's factors (the weight a vote keeps once a rule says it counts for less)
STRUCTURE_VOTE = 1.0  # a structure reading's vote, before the structure rules' weight scales it
OUTSIDE_VOTE = 1.0  # the "other" vote of a failing line that is a script/config/app error outside QNN
STOPPED_WEIGHT = 3.0  # an export/convert log that stops without an end marker or an error line: convert_segfault
SURVIVED_FACTOR = 0.3  # weight left to a warning-level hit once a later failure of another category stopped the run
CRASH_AFTER_ERROR_FACTOR = 0.5  # weight left to a crash that follows a clear error of another category
WORDS_AGAINST_LOG_FACTOR = 0.5  # weight left to the reporter's words when the log's own lines already name a failure
EXPORT_TOOL_VOTE = 8.0  # a Python exception raised by one of MNN's export/conversion scripts (export_script_error)
EXPORT_AFTER_FAILURE_FACTOR = 0.2  # weight left to it when a crash or QNN failure printed before it is its cause
EXPORT_LINE_FACTOR = 0.2  # weight left to other readings of the exception line itself (the script's wrapper words)
OUTSIDE_FACTOR = 0.5  # weight left to words and structure once the log's failing lines are a script error outside QNN

# --- confidence: (1 - exp(-top / CONFIDENCE_SCALE)) * top / (top + runner-up), capped by the basis
CONFIDENCE_SCALE = 6
MAX_CONFIDENCE = 0.99
SUCCESS_CONFIDENCE = 0.5  # no failure at min_score, but a line says the run succeeded
NOTHING_CONFIDENCE = 0.2  # no failure at min_score and nothing says success
WORDS_ONLY_CONFIDENCE = 0.6  # cap when only the reporter's words decided
LOW_CONFIDENCE = 0.45  # below this a known wording's answer is flagged low-confidence (others score close)
NOT_TEXT_FRACTION = 0.05  # above this share of NUL/undecodable bytes triage warns the input may not be a log

# The rule book triage is measured against, where an unsure answer sends the reader (a playbook, served as
# playbook://triage-labels).
RULE_BOOK = "playbooks/triage-labels.md"
