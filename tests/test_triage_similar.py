"""Similar public threads: the shipped index matches the corpus, threads reach the user, the lean decides only
where no rule names a failure and only when it is clear."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.triage import triage_log
from qnn_debug.triage.similar import (
    DATA_FILE,
    HEAD_CHARS,
    POLICY,
    TAIL_CHARS,
    LabelledLog,
    SimilarFeed,
    SimilarIndex,
    build_index,
    log_counts,
    opinion,
    read_corpus,
    shipped_index,
    tokens,
)

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "triage_corpus"
sys.path.insert(0, str(REPO / "bench"))
from triage_similar_index import corpus_index, render  # noqa: E402

HEALTHY = (
    "Collecting numpy\n  Downloading numpy-2.1.0.tar.gz (18.9 MB)\nInstalling collected packages: numpy\n"
    "Successfully installed numpy-2.1.0\n",
    "[100%] Built target demo\nInstall the project...\n-- Install configuration: \"Release\"\n",
    "epoch 3/10 loss=0.231 acc=0.912\nepoch 4/10 loss=0.207 acc=0.921\nsaved checkpoint to ckpt/epoch4.pt\n",
)


def test_shipped_index_is_built_from_the_current_corpus() -> None:
    """Fails when the corpus changed and `python bench/triage_similar_index.py` was not re-run."""
    assert DATA_FILE.read_text(encoding="utf-8") == render(corpus_index()), (
        "data/triage_public_cases.json is out of date with tests/fixtures/triage_corpus: "
        "run python bench/triage_similar_index.py")
    manifest = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))["cases"]
    index = shipped_index()
    assert [c.id for c in index.cases] == [c["id"] for c in manifest]
    assert all(c.url == m["source"] and c.category == m["expected"] for c, m in zip(index.cases, manifest, strict=True))
    assert all(len(c.weights) > 0 and "\n" not in c.note for c in index.cases)


def test_tokens_collapse_what_differs_between_reports_and_keep_qnn_names() -> None:
    a = tokens("2024-05-01 10:22:33.123 pid 4411 /home/alice/sdk/lib/libQnnHtp.so: QNN_GRAPH_ERROR_INVALID_OP 0xc26 at 0x7f3a9c0042")
    b = tokens("2025-11-30 23:01:02.999 pid 77 C:\\Users\\bob\\qairt\\libQnnHtp.so: QNN_GRAPH_ERROR_INVALID_OP 0xc26 at 0x55d0aa10ff")
    assert a == b
    assert {"libqnnhtp.so", "qnn_graph_error_invalid_op", "graph", "invalid", "0xc26", "3110", "addrtok"} <= set(a)
    assert "alice" not in a and "4411" not in a
    assert {"validateopconfig", "validate", "config"} <= set(tokens("validateOpConfig failed"))
    assert {"段错", "错误"} <= set(tokens("运行时段错误"))


def test_a_corpus_log_given_as_text_finds_its_thread_with_its_url() -> None:
    case = next(c for c in read_corpus(CORPUS) if c.id == "et-17083")
    r = triage_log(text=case.text)  # no id travels with the text
    assert r.category == case.category
    top = r.similar.threads[0]
    assert top.id == "et-17083" and top.url == case.url and top.similarity > 0.99 and top.shared_terms
    assert len(r.similar.threads) <= 3 and all(t.url.startswith("https://github.com/") for t in r.similar.threads)


@pytest.mark.parametrize("text", HEALTHY)
def test_an_unrelated_healthy_log_keeps_other(text: str) -> None:
    r = triage_log(text=text)
    assert r.category == "other" and not r.similar.decided


def _words(stem: str, n: int = 40) -> list[str]:
    """``n`` distinct made-up words no rule knows (each one token)."""
    return [f"{stem}{a}{b}" for a in "abcdefgh" for b in "pqrstu"][:n]


VOCAB = {"build_error": _words("zeb"), "vtcm_or_memory": _words("wal"), "execute_failed_6000": _words("mar")}


def _index() -> SimilarIndex:
    logs = [LabelledLog(id=f"{cat}-{i}", category=cat, url=f"https://github.com/example/{cat}/issues/{i}",
                        text=" ".join(words[i:] + words[:i]))
            for cat, words in VOCAB.items() for i in range(3)]
    logs.append(LabelledLog(id="other-0", category="other", url="https://github.com/example/other/issues/0",
                            text="pelican toucan"))
    return build_index(logs)


def test_the_lean_decides_only_where_no_rule_names_a_failure_and_it_is_clear() -> None:
    index = _index()
    build = " ".join(VOCAB["build_error"][:35])
    lean = triage_log(text=build + "\nthe export fails with an error\n", similar=index)
    assert lean.category == "build_error" and lean.similar.decided
    assert lean.confidence <= POLICY.confidence and lean.hypotheses[0].category == "build_error"
    assert "example/build_error" in " ".join(lean.hypotheses[0].why)
    assert lean.basis == "similar" and lean.low_confidence and lean.low_confidence_reason
    quiet = triage_log(text=build + "\n", similar=index)
    assert quiet.category == "other" and not quiet.similar.decided  # nothing in the log says that anything failed
    short = triage_log(text=" ".join(VOCAB["build_error"][:5]) + " error\n", similar=index)
    assert short.similar.terms < POLICY.min_terms and short.category == "other"  # too short to compare
    tie = triage_log(text=" ".join(VOCAB["build_error"][:20] + VOCAB["vtcm_or_memory"][:20]) + " error\n", similar=index)
    assert tie.similar.margin < POLICY.min_margin and tie.category == "other" and not tie.similar.decided
    far = triage_log(text=" ".join(VOCAB["build_error"][:2] + _words("qqq", 48) + ["error"]) + "\n", similar=index)
    assert far.similar.similarity < POLICY.min_similarity and far.category == "other"
    ruled = triage_log(text=build + " error\nQnnGraph_finalize failed: graph finalize failed 1002\n", similar=index)
    assert ruled.category == "finalize_failed_1002" and not ruled.similar.decided


def test_the_lean_needs_a_log_that_says_something_failed() -> None:
    healthy = "Test convert_cache.mnn from input info: onnx\nRun for 0 time\nWrite y output to output/0_0.txt\n"
    healthy += " ".join(VOCAB["vtcm_or_memory"]) + "\n"
    index = build_index([LabelledLog(id=f"v-{i}", category="vtcm_or_memory", url="https://github.com/e/v/issues/1",
                                     text=healthy) for i in range(2)])
    ok = triage_log(text=healthy, similar=index)  # the same text as a labelled failure, but it says nothing failed
    assert ok.similar.category == "vtcm_or_memory" and ok.similar.similarity > 0.9
    assert ok.category == "other" and not ok.similar.decided


def test_cli_lists_the_similar_threads(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text((CORPUS / "mnn-4716.log").read_text(encoding="utf-8"), encoding="utf-8")
    out = CliRunner().invoke(app, ["triage", str(log)])
    assert out.exit_code == 0, out.output
    assert "similar public threads" in out.output and "https://github.com/alibaba/MNN/issues/4716" in out.output


def test_the_feed_is_bounded_and_reads_both_ends() -> None:
    feed = SimilarFeed()
    feed.feed("head QNN_COMMON_ERROR_NOT_SUPPORTED\n" + "x\n" * (HEAD_CHARS // 2))
    for _ in range(8):
        feed.feed("filler line\n" * (TAIL_CHARS // 12))
    feed.feed("tail libQnnHtpV75Skel.so cannot open\n")
    text = feed.text()
    assert len(text) <= HEAD_CHARS + TAIL_CHARS + 1
    assert "QNN_COMMON_ERROR_NOT_SUPPORTED" in text and "libQnnHtpV75Skel.so" in text


def test_the_opinion_is_fast_on_every_corpus_log() -> None:
    index = shipped_index()
    logs = read_corpus(CORPUS)
    opinion(log_counts(logs[0].text), index)  # postings and centroids are built once
    start = time.process_time()
    for log in logs:
        opinion(log_counts(log.text), index)
    per_log = (time.process_time() - start) / len(logs)
    assert per_log < 0.02, f"{per_log * 1000:.1f} ms per log"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_triage_result_carries_the_similar_threads(tmp_path: Path) -> None:
    from test_mcp_support import connect, ok

    text = (CORPUS / "mnn-4716.log").read_text(encoding="utf-8")
    async with connect(tmp_path, "auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        answer = ok(await client.call_tool("triage_log", {"log_text": text}))
    assert "similar" in (tools["triage_log"].output_schema or {}).get("properties", {})
    threads = answer["similar"]["threads"]
    assert threads[0]["url"] == "https://github.com/alibaba/MNN/issues/4716" and threads[0]["category"]
    assert set(threads[0]) >= {"id", "url", "category", "similarity", "shared_terms"}


def test_in_sample_accuracy_never_lets_a_log_find_itself() -> None:
    """The accuracy script's in-sample figure is leave-one-out for this layer: each log's index lacks it."""
    sys.path.insert(0, str(REPO / "tests"))
    from triage_accuracy import _case_id, _Corpus, _key_is

    inside = _Corpus()
    case = next(log for log in inside.logs if log.id == "et-17083")
    alone = triage_log(text=case.text, similar=inside.index_without(_key_is(_case_id, case.id)))
    assert alone.similar.threads and all(t.id != case.id for t in alone.similar.threads)
    assert triage_log(text=case.text).similar.threads[0].id == case.id  # the shipped index does hold it


@pytest.mark.parametrize("line", ["a." * 64000, "a-" * 64000, "x@" * 64000, "2024-01-0" * 14000, "/a" * 64000])
def test_a_hostile_line_is_read_in_linear_time(line: str) -> None:
    feed = SimilarFeed()
    feed.feed(line + "\nerror\n")
    start = time.process_time()
    feed.opinion()
    assert time.process_time() - start < 3.0
