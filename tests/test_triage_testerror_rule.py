"""Triage reads ModuleBasic's TESTERROR as what it is: an error over 1% of the output's max, which an fp16 engine can
give on a healthy model, so its next steps send the user to compare against the fp16 floor and say so."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app

LOGS = {
    "modulebasic": "ModuleBasic.out det.mnn testdir 0 5 1 1 2\nThe device supports: i8sdot:1\n"
                   "TESTERROR sigmoid_0.tmp_0 value error : absMaxV:0.999512 - DiffMax 0.034912\nError for output\n",
    "testMNNFromOnnx": "python3 testMNNFromOnnx.py model.onnx\nTest Node : y True\n"
                       "TESTERROR y value error : absMaxV:5.814027 - DiffMax 0.120000\nTEST_FAIL\n",
}


def _triage(text: str, tmp_path) -> dict:
    log = tmp_path / "run.log"
    log.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(app, ["triage", str(log), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", sorted(LOGS))
def test_testerror_steps_say_the_one_percent_rule_is_no_verdict_at_fp16(kind: str, tmp_path) -> None:
    doc = _triage(LOGS[kind], tmp_path)
    assert doc["category"] == "wrong_results_accuracy", doc
    notes = [s for s in doc["next_steps"] if "1% of the output's max" in s["why"]]
    assert len(notes) == 1 and "qnn-debug compare" in notes[0]["cli"], doc["next_steps"]
    assert "fp16 floor" in notes[0]["why"]


def test_other_wrong_numbers_logs_get_no_testerror_note(tmp_path) -> None:
    doc = _triage("llm_demo config.json prompt.txt\nthe output is garbled: 的的的的的的 after the QNN backend\n"
                  "Error for output logits\n", tmp_path)
    assert not any("1% of the output's max" in s["why"] for s in doc["next_steps"]), doc["next_steps"]
