"""What an assistant sees at the skill's triage step, got through the real MCP server: ``python
tests/triage_reading_packet.py LOG_DIR OUT.json``.

The skill's first step is the ``triage_log`` tool and, when its answer has ``low_confidence``, the assistant's own
reading of the log by the rule book (``playbook://triage-labels``). To measure that step as users meet it, this script
starts ``qnn-debug-mcp --root LOG_DIR`` over stdio with the official MCP client, as a host does, calls ``triage_log``
on every ``*.log`` in the folder and reads the rule book resource, and writes both to ``OUT.json`` (never inside
``LOG_DIR``). A reader who has not seen the labels then answers each case from that packet and the log; those answers
are kept as each held-out case's ``assistant`` record and scored by ``tests/triage_accuracy.py``.

How round 8 was read (repeat it for a new round): the logs are copied, without the manifest, into a folder per reader
and one packet is built per folder. Each reader gets only SKILL.md, the playbooks, its packet and its logs, never the
code, the tests or the labels. For every log it names one of the 16 categories by the rule book (order of failures
first, then the table and the settled borderline readings, with triage's answer only as a lead), quotes the deciding
line verbatim from the log and says whether it is sure. The record per case is ``{"triage", "low_confidence"}`` from a
packet built with the engine that ships, and ``{"reading", "quote", "sure"}`` from the reader;
``test_triage_corpus`` checks each quote is in its log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from test_mcp_support import stdio_params

RULE_BOOK = "playbook://triage-labels"
KEPT = ("category", "title", "confidence", "basis", "low_confidence", "low_confidence_reason", "playbook_uri")


def _answer(structured: dict[str, Any]) -> dict[str, Any]:
    """The fields the assistant acts on, and the evidence lines triage quoted."""
    out = {k: structured.get(k) for k in KEPT}
    out["evidence"] = [f"{e['line']}: {e['text']}" for e in structured.get("evidence", [])[:8]]
    out["next_steps"] = [f"{s.get('tool') or 'cli'}: {s.get('why', '')}" for s in structured.get("next_steps", [])[:4]]
    return out


async def build_packet(log_dir: Path) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    async with Client(stdio_params(log_dir)) as client:
        book = await client.read_resource(RULE_BOOK)
        for log in sorted(log_dir.glob("*.log")):
            result = await client.call_tool("triage_log", {"log_path": str(log)})
            if result.is_error or result.structured_content is None:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                cases.append({"id": log.stem, "file": log.name, "error": text})
                continue
            cases.append({"id": log.stem, "file": log.name, "triage": _answer(result.structured_content)})
    return {"rule_book": getattr(book.contents[0], "text", ""), "cases": cases}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    log_dir, out = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    if not log_dir.is_dir():
        print(f"not a folder: {log_dir}", file=sys.stderr)
        return 2
    if out.is_relative_to(log_dir):
        print("write the packet outside the log folder (the server's root)", file=sys.stderr)
        return 2
    packet = anyio.run(build_packet, log_dir)
    out.write_text(json.dumps(packet, ensure_ascii=False, indent=1), encoding="utf-8")
    low = sum(bool(c.get("triage", {}).get("low_confidence")) for c in packet["cases"])
    errors = sum("error" in c for c in packet["cases"])
    print(f"{len(packet['cases'])} logs triaged through the MCP server ({low} low confidence, {errors} errors); "
          f"rule book {len(packet['rule_book'])} chars -> {out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
