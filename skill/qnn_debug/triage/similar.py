"""Similar public threads: the labelled public logs nearest to this one, as a second opinion beside the rules.

Why: the rules know wordings and structure; a log told in other words can still look like a thread already read
(same libraries, same QNN objects, same crash frames, same user words). Each labelled log of the in-sample corpus is
kept as a TF-IDF vector (sublinear term frequency, L2-normalised) of normalised tokens: numbers, hex values,
addresses, paths, URLs, timestamps and user names collapse to classes so that only what is shared across reports
counts; QNN/MNN identifiers, status names and library names are kept whole and also split into their camelCase /
snake_case parts; Chinese is read as character bigrams. A log's nearest threads (cosine) vote for a category
weighted by similarity.

The index (``data/triage_public_cases.json``) is built from the corpus by :func:`build_index` (run by
``bench/triage_similar_index.py``); it holds term weights, not the logs. Pure Python: no heavy import.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import BaseModel, Field

from ..errors import BadInputError

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "triage_public_cases.json"
INDEX_VERSION = 1
MAX_TERMS_PER_CASE = 160
HEAD_CHARS = 128 << 10  # a huge log is read for its first and last 128 KiB: its failure is near one end
TAIL_CHARS = 128 << 10
SHOWN = 3
SHOWN_MIN_SIMILARITY = 0.12
SHARED_TERMS = 6


class SimilarThread(BaseModel):
    """A labelled public thread whose log resembles this one (cosine of normalised-token TF-IDF vectors)."""

    id: str
    url: str = Field(description="the public thread the log comes from")
    category: str = Field(description="the category that thread's log is labelled with")
    similarity: float = Field(ge=0, le=1)
    shared_terms: list[str] = Field(default_factory=list, description="the shared tokens that weigh most")
    note: str = ""


class IndexCase(BaseModel):
    id: str
    category: str
    url: str
    note: str = ""
    round: str = ""
    weights: dict[str, float]


class SimilarIndex(BaseModel):
    """The shipped index: inverse document frequencies and one unit-length weight vector per labelled log."""

    version: int = INDEX_VERSION
    about: str = ""
    documents: int
    default_idf: float = Field(description="idf of a token no indexed log holds")
    idf: dict[str, float]
    cases: list[IndexCase]


# --------------------------------------------------------------------------- tokens

_STOPWORDS = (
    "the a an to is in of and for on with at this that it be as by from or are was were has have had i we you my our "
    "me he she they them its if so do does did but can could would should will just also then than there here what "
    "when which who how all any some into out up about after before only such via use used using get got like run "
    "ran same one two see try tried")
_STOP = frozenset(_STOPWORDS.split())
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_URL = re.compile(r"https?://\S+|www\.\S+")
# Every repetition that could rescan a long run of word characters is bounded, so a hostile line stays linear.
_USER_AT = re.compile(r"\b[\w.-]{1,64}@[\w.-]{1,128}(?::\S{0,256})?")
_FILE = re.compile(r"(?i)\b([\w+-]{1,128}(?:\.[\w+-]{1,128}){0,6}\.(?:so|dll|dylib|a|lib|bin|mnn|onnx|pte|tflite|dlc|py|cpp|cc|c|h|hpp"
                   r"|json|apk|aar|exe))(?:\.\d+)*\b")
_PATH = re.compile(r"(?:\b[A-Za-z]:)?(?:[\\/][\w.@~+-]+){2,}[\\/]?|~(?:[\\/][\w.@~+-]+)+")
_TIME = re.compile(r"\b\d{1,4}[-/.:]\d{1,2}[-/.:]\d{1,4}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?(?:[.,]\d+)?\b")
_HEX = re.compile(r"\b0[xX]([0-9a-fA-F]+)\b")
_FLOAT = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:[eE][-+]?\d+)?\b")
_INT = re.compile(r"(?<![\w.])\d+(?![\w.]*[A-Za-z_])")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.-][A-Za-z][A-Za-z0-9_]*)*|[A-Za-z0-9_]*[A-Za-z][A-Za-z0-9_]*|\b\d{4,5}\b")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
_HASHLIKE = re.compile(r"^(?=.*\d)[0-9a-f]{7,}$")


@cache
def _status_numbers() -> frozenset[str]:
    """QNN status numbers (Qualcomm's headers): kept as themselves, every other number collapses to a class."""
    data = json.loads((Path(__file__).resolve().parent.parent / "data" / "qnn_error_codes.json").read_text(encoding="utf-8"))
    return frozenset(str(int(k)) for k in data["codes"] if int(k) >= 1000)


def _number(m: re.Match[str]) -> str:
    return f" {m.group(0)} " if m.group(0) in _status_numbers() else " numtok "


def _hex(m: re.Match[str]) -> str:
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) >= 6:
        return " addrtok "
    value = str(int(digits, 16))
    return f" 0x{digits.lower()} {value} " if value in _status_numbers() else " hextok "


def _file(m: re.Match[str]) -> str:
    return f" filetok {m.group(1).replace('.', '_dot_')} "


def _words(text: str) -> Iterable[str]:
    for m in _WORD.finditer(text):
        yield from _word_tokens(m.group(0))


@lru_cache(maxsize=1 << 16)
def _word_tokens(word: str) -> tuple[str, ...]:
    if word.isdigit() or word.startswith("0x"):  # a QNN status number (others became numtok)
        return (word,)
    if "_dot_" in word:  # a file name kept whole: libQnnHtp.so -> libqnnhtp.so and lib, qnn, htp
        return (word.replace("_dot_", ".").lower(), *_parts(word.split("_dot_", 1)[0], whole=False))
    return tuple(_parts(word, whole=True))


def _parts(word: str, whole: bool) -> Iterable[str]:
    low = word.lower()
    if _HASHLIKE.match(low):
        yield "hashtok"
        return
    pieces = [p.lower() for chunk in re.split(r"[_.-]+", word) for p in _CAMEL.split(chunk) if p]
    pieces = [p for p in pieces if len(p) > 1 and not p.isdigit() and p not in _STOP]
    if whole and len(low) > 1 and not low.isdigit() and low not in _STOP and (len(pieces) != 1 or pieces[0] != low):
        yield low
    yield from pieces


def tokens(text: str) -> list[str]:
    """Normalised tokens of a log: classes for what differs between reports, identifiers whole and in parts."""
    out: list[str] = []
    for run in _CJK_RUN.findall(text):
        out.extend(run if len(run) == 1 else (run[i : i + 2] for i in range(len(run) - 1)))
    text = _CJK_RUN.sub(" ", text)
    text = _URL.sub(" urltok ", text)
    text = _USER_AT.sub(" usertok ", text)
    text = _FILE.sub(_file, text)
    text = _PATH.sub(" pathtok ", text)
    text = _TIME.sub(" timetok ", text)
    text = _HEX.sub(_hex, text)
    text = _FLOAT.sub(" floattok ", text)
    text = _INT.sub(_number, text)
    out.extend(_words(text))
    return out


_FAILURE_LINE = re.compile(
    r"(?i)\b(?:errors?|fail(?:s|ed|ure|ing)?|crash(?:es|ed|ing)?|abort(?:s|ed)?|segmentation|fault|unable|cannot|can't"
    r"|could not|not (?:found|supported|registered)|invalid|mismatch(?:ed)?|exception|denied|garbled|wrong|core dumped"
    r"|sig(?:segv|abrt|bus)|traceback|undefined)\b|错误|出错|报错|崩溃|闪退|乱码|失败|不成功|异常|无法")


def says_failed(text: str) -> bool:
    """Whether any line says that something failed (English or Chinese): without one, nothing failed (``other``)."""
    return _FAILURE_LINE.search(text) is not None


def log_counts(text: str) -> Counter[str]:
    """Token counts of a log; the tokens of lines that say something failed count twice (they name the failure)."""
    counts = Counter(tokens(text))
    counts.update(tokens("\n".join(line for line in text.splitlines() if _FAILURE_LINE.search(line))))
    return counts


# --------------------------------------------------------------------------- vectors and the index


def _sublinear(counts: Counter[str]) -> dict[str, float]:
    return {t: 1.0 + math.log(n) for t, n in counts.items()}


def _unit(vec: dict[str, float]) -> dict[str, float]:
    norm = math.sqrt(sum(v * v for v in vec.values())) or 1.0
    return {t: v / norm for t, v in vec.items()}


@dataclass(frozen=True)
class LabelledLog:
    """One labelled log for :func:`build_index`."""

    id: str
    category: str
    url: str
    text: str
    note: str = ""
    round: str = ""


def build_index(logs: Sequence[LabelledLog], about: str = "",
                counted: Sequence[Counter[str]] | None = None) -> SimilarIndex:
    """TF-IDF index of labelled logs; each case keeps its ``MAX_TERMS_PER_CASE`` heaviest terms, re-normalised.

    ``counted`` are the logs' token counts when the caller has them already (cross-validation builds many indices).
    """
    if counted is None:
        counted = [log_counts(log.text) for log in logs]
    n = len(logs)
    df: Counter[str] = Counter()
    for c in counted:
        df.update(c.keys())
    idf = {t: round(math.log((n + 1) / (d + 1)) + 1.0, 4) for t, d in sorted(df.items())}
    cases = []
    for log, c in zip(logs, counted, strict=True):
        vec = {t: w * idf[t] for t, w in _sublinear(c).items()}
        top = sorted(vec.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_TERMS_PER_CASE]
        weights = {t: round(w, 4) for t, w in sorted(_unit(dict(top)).items())}
        cases.append(IndexCase(id=log.id, category=log.category, url=log.url, note=log.note, round=log.round, weights=weights))
    kept = {t for case in cases for t in case.weights}
    return SimilarIndex(about=about, documents=n, default_idf=round(math.log(n + 1) + 1.0, 4),
                        idf={t: v for t, v in idf.items() if t in kept}, cases=cases)


def read_corpus(corpus: Path) -> list[LabelledLog]:
    """The labelled logs of a triage corpus directory (its ``manifest.json`` and log files)."""
    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    return [LabelledLog(id=c["id"], category=c["expected"], url=c["source"], note=_one_line(c.get("note", "")),
                        round=c.get("round", ""), text=(corpus / c["file"]).read_text(encoding="utf-8", errors="replace"))
            for c in manifest["cases"]]


def _one_line(note: str) -> str:
    first = re.split(r"(?<=[.;])\s|\s\(", note.strip(), maxsplit=1)[0]
    return first[:160].rstrip(" .;:")


@cache
def shipped_index() -> SimilarIndex:
    try:
        return SimilarIndex.model_validate_json(DATA_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInputError(f"the similar-threads index {DATA_FILE.name} cannot be read: {e}",
                            hint="reinstall the package, or rebuild it with bench/triage_similar_index.py") from None


@dataclass
class _Postings:
    index: SimilarIndex
    by_term: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, case in enumerate(self.index.cases):
            for t, w in case.weights.items():
                self.by_term.setdefault(t, []).append((i, w))


class _FromIndex(Protocol):
    index: SimilarIndex


_D = TypeVar("_D", bound=_FromIndex)
_POSTINGS: dict[int, _Postings] = {}


def _postings(index: SimilarIndex) -> _Postings:
    return _derived(_POSTINGS, index, _Postings)


def _derived(cache: dict[int, _D], index: SimilarIndex, build: Callable[[SimilarIndex], _D]) -> _D:
    """What ``build`` derives from ``index``, built once per index object (indexes are immutable once loaded;
    leave-one-out evaluation makes many, hence the bound)."""
    d = cache.get(id(index))
    if d is None or d.index is not index:
        if len(cache) > 64:
            cache.clear()
        d = cache[id(index)] = build(index)
    return d


def _query(counts: Counter[str], index: SimilarIndex) -> dict[str, float]:
    return _unit({t: w * index.idf.get(t, index.default_idf) for t, w in _sublinear(counts).items()})


def nearest(counts: Counter[str], index: SimilarIndex, k: int) -> list[SimilarThread]:
    """The ``k`` indexed logs most similar to a log's token counts (cosine), best first."""
    if not counts:
        return []
    query = _query(counts, index)
    post = _postings(index)
    score: dict[int, float] = {}
    for t, qw in query.items():
        for i, dw in post.by_term.get(t, ()):
            score[i] = score.get(i, 0.0) + qw * dw
    ranked = sorted(score, key=lambda i: (-score[i], index.cases[i].id))[:k]
    out = []
    for i in ranked:
        case = index.cases[i]
        shared = sorted((t for t in query if t in case.weights), key=lambda t: (-query[t] * case.weights[t], t))
        out.append(SimilarThread(id=case.id, url=case.url, category=case.category, similarity=round(min(score[i], 1.0), 3),
                                 shared_terms=[t for t in shared if not t.endswith("tok")][:SHARED_TERMS], note=case.note))
    return out


# --------------------------------------------------------------------------- the opinion


class SimilarOpinion(BaseModel):
    """What the labelled public logs say about this one: the nearest threads and the category they lean to."""

    threads: list[SimilarThread] = Field(default_factory=list, description="the nearest public threads, closest first")
    category: str | None = Field(None, description="the category whose labelled logs, taken together, are closest")
    similarity: float = Field(0.0, description="cosine of this log with that category's centroid")
    margin: float = Field(0.0, description="how much closer that category is than the next one")
    terms: int = Field(0, description="distinct tokens of this log that were compared")
    decided: bool = Field(False, description="true when no rule named a failure and this lean gave the category")


@dataclass(frozen=True)
class Policy:
    """When the lean may give the category: only where no rule names a failure, and only when it is clear.

    Chosen by leave-one-round-out cross-validation against the rules' answers measured on each held-out round
    when it was held out (``tests/triage_accuracy.py --cross-rounds``): the lean never overrides a rule (where
    the rules were weak but named a failure it was more often wrong than they were), and it needs a centroid
    cosine of ``min_similarity`` and a ``min_margin`` over the next category so that a log like nothing in the
    corpus (a healthy run of something else) keeps ``other``. A log of fewer than ``min_terms`` distinct tokens (a
    line or two) is too short to compare: the rules alone read it.
    """

    k: int = 5
    min_similarity: float = 0.15
    min_margin: float = 0.01
    min_terms: int = 30
    confidence: float = 0.3


POLICY = Policy()


@dataclass
class _Centroids:
    index: SimilarIndex
    by_category: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sums: dict[str, dict[str, float]] = {}
        for case in self.index.cases:
            acc = sums.setdefault(case.category, {})
            for t, w in case.weights.items():
                acc[t] = acc.get(t, 0.0) + w
        self.by_category = {c: _unit(v) for c, v in sorted(sums.items())}


_CENTROIDS: dict[int, _Centroids] = {}


def _centroids(index: SimilarIndex) -> _Centroids:
    return _derived(_CENTROIDS, index, _Centroids)


def opinion(counts: Counter[str], index: SimilarIndex, policy: Policy = POLICY) -> SimilarOpinion:
    """The nearest threads (kNN, shown to the user) and the category lean (nearest category centroid)."""
    threads = nearest(counts, index, policy.k)
    if not counts or not index.cases:
        return SimilarOpinion(threads=threads)
    query = _query(counts, index)
    scores = sorted(((sum(w * centroid.get(t, 0.0) for t, w in query.items()), c)
                     for c, centroid in _centroids(index).by_category.items()), key=lambda sc: (-sc[0], sc[1]))
    best, category = scores[0]
    second = scores[1][0] if len(scores) > 1 else 0.0
    return SimilarOpinion(threads=threads, category=category, similarity=round(best, 3), margin=round(best - second, 3),
                          terms=len(counts))


def leans(op: SimilarOpinion, policy: Policy = POLICY) -> bool:
    """Whether the lean is clear enough to give a category where the rules name no failure (the log must also say
    that something failed: :meth:`SimilarFeed.leans`)."""
    return (op.category is not None and op.category != "other" and op.similarity >= policy.min_similarity
            and op.margin >= policy.min_margin and op.terms >= policy.min_terms)


def lean_reason(op: SimilarOpinion) -> str:
    near = ", ".join(f"{t.url} ({t.similarity:.2f})" for t in op.threads if t.category == op.category)[:300]
    return (f"no rule names a failure, but the labelled public logs closest to this one are {op.category} "
            f"(category cosine {op.similarity:.2f}, {op.margin:.2f} above the next category)"
            + (f"; nearest: {near}" if near else ""))


class SimilarFeed:
    """Collects a streamed log's head and tail text (bounded) for the opinion at the end of the scan."""

    def __init__(self, index: SimilarIndex | None = None) -> None:
        self._index = index
        self._head: list[str] = []
        self._head_chars = 0
        self._tail = ""
        self._opinion: SimilarOpinion | None = None

    def feed(self, text: str) -> None:
        room = HEAD_CHARS - self._head_chars
        if room > 0:
            self._head.append(text[:room])
            self._head_chars += min(room, len(text))
            text = text[room:]
        if text:
            self._tail = (self._tail + text[-TAIL_CHARS:])[-TAIL_CHARS:]

    def text(self) -> str:
        tail = self._tail
        if "\n" in tail:
            tail = tail[tail.index("\n") + 1 :]  # the first tail line may be cut
        return "".join(self._head) + "\n" + tail

    def opinion(self) -> SimilarOpinion:
        if self._opinion is None:
            index = shipped_index() if self._index is None else self._index
            self._opinion = opinion(log_counts(self.text()), index)
        return self._opinion

    def leans(self) -> bool:
        """The lean may give the category: it is clear, and the log says somewhere that something failed."""
        return leans(self.opinion()) and says_failed(self.text())


def shown(threads: Sequence[SimilarThread]) -> list[SimilarThread]:
    """The threads worth showing a user: the closest few above a floor."""
    return [t for t in threads if t.similarity >= SHOWN_MIN_SIMILARITY][:SHOWN]
