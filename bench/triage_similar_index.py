"""Build the similar-threads index shipped with the engine from the in-sample triage corpus.

``data/triage_public_cases.json`` holds, for every labelled log of ``tests/fixtures/triage_corpus``, its id, category,
source URL, a one-line note and its token weights (not the log). Only the in-sample corpus goes in: a held-out log in
the index would find itself. Re-run after the corpus changes; ``tests/test_triage_similar.py`` fails while the shipped
file is out of date.

Run: ``python bench/triage_similar_index.py [--check]`` (``--check``: exit 1 when the shipped file differs, write nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path

from qnn_debug.triage.similar import DATA_FILE, SimilarIndex, build_index, read_corpus

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "triage_corpus"
ABOUT = ("Similar public threads for `qnn-debug triage`: one TF-IDF weight vector of normalised tokens per labelled "
         "in-sample log (tests/fixtures/triage_corpus), with its category and source URL; the logs themselves are not "
         "here. Built by bench/triage_similar_index.py; held-out logs are never indexed.")


def corpus_index(corpus: Path = CORPUS) -> SimilarIndex:
    return build_index(read_corpus(corpus), about=ABOUT)


def render(index: SimilarIndex) -> str:
    return index.model_dump_json(indent=None) + "\n"


def main(argv: list[str]) -> int:
    text = render(corpus_index())
    if "--check" in argv:
        current = DATA_FILE.read_text(encoding="utf-8") if DATA_FILE.exists() else ""
        if current != text:
            print(f"{DATA_FILE.name} is out of date with the corpus: run python bench/triage_similar_index.py")
            return 1
        print(f"{DATA_FILE.name} is up to date")
        return 0
    index = SimilarIndex.model_validate_json(text)
    DATA_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {DATA_FILE.name} ({len(text) // 1024} KiB, {len(index.cases)} cases, {len(index.idf)} terms)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
