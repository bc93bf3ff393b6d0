"""The packet an assistant answers the skill's triage step from is got through the real MCP server over stdio."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triage_reading_packet
from qnn_debug.triage.signatures import CATEGORIES
from triage_accuracy import CORPUS


def test_packet_holds_each_logs_triage_answer_and_the_rule_book(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("mnn-4118.log", "aihubapps-115.log"):
        shutil.copy(CORPUS / name, logs / name)
    (logs / "words-only.log").write_text("my model gives 乱码 on the NPU after export\n", encoding="utf-8")
    out = tmp_path / "packet.json"
    assert triage_reading_packet.main([str(logs), str(out)]) == 0
    packet = json.loads(out.read_text(encoding="utf-8"))
    assert packet["rule_book"].startswith("# How a failure log is read into one category")
    assert [c["id"] for c in packet["cases"]] == ["aihubapps-115", "mnn-4118", "words-only"]
    for case in packet["cases"]:
        answer = case["triage"]
        assert answer["category"] in CATEGORIES and isinstance(answer["low_confidence"], bool)
    by_id = {c["id"]: c["triage"] for c in packet["cases"]}
    assert by_id["mnn-4118"]["category"] == "build_error" and by_id["mnn-4118"]["evidence"]
    assert by_id["words-only"]["low_confidence"] and "triage-labels" in by_id["words-only"]["low_confidence_reason"]


def test_packet_is_refused_inside_the_servers_root(tmp_path: Path) -> None:
    assert triage_reading_packet.main([str(tmp_path), str(tmp_path / "packet.json")]) == 2
    assert not (tmp_path / "packet.json").exists()
