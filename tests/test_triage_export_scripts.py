"""Python errors of MNN's export and conversion scripts are their own class, routed to llm-check (round 9).

Round 9's reports (``fixtures/triage_reports9``) are paraphrases of public threads, the reporter's words around the
log, written and labelled by ``playbooks/triage-labels.md`` and split by a fixed rule (sha1 of the case id: first hex
character 0-7 the tuning part, 8-f the held-out part) before any engine change. The engine before the round scored
10/18 on the tuning part and 4/20 = 20.0% on the held-out part (it had no such class: the refusals read as crashes
from the reporter's words, or as nothing). Measured once after the round's changes: tuning 18/18, held-out
18/20 = 90.0%. The two held-out misses (read after the measurement, not tuned on): a diffusion export whose traceback
has only transformers frames, the MNN script named only in the reporter's sentence (r9-sd-export, answered other), and
a ``Compute Shape Error`` in a generate_llm_qnn.py Step 2 log with no end marker, read as a stopped export
(r9-convert-shape). In-sample and round-8 answers: not one of 576 changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.triage import triage_log

ROUND9 = Path(__file__).resolve().parent / "fixtures" / "triage_reports9"
# Floors set AFTER the single measurement of each part (never above it): a regression fails here.
TUNING_FLOOR = 18 / 18
HELDOUT_FLOOR = 18 / 20

USER_VL_REFUSAL = """I exported Qwen3-VL-2B with llmexport and then ran generate_llm_qnn.py on the visual model, it fails at once:

Traceback (most recent call last):
  File "/home/me/MNN/transformers/llm/export/npu/generate_llm_qnn.py", line 402, in <module>
    convert_qnn(args)
  File "/home/me/MNN/transformers/llm/export/npu/generate_llm_qnn.py", line 160, in makeVLIOJson
    raise ValueError("Unsupported visual model")
ValueError: Unsupported visual model

before that the export said segmentation fault once but I re-ran it and it finished. What am I doing wrong?
"""

LLMEXPORT_IMPORT = """pip installed llmexport, it won't start:
Traceback (most recent call last):
  File "/opt/venv/bin/llmexport", line 5, in <module>
    from llmexport.llmexport import main
  File "/opt/venv/lib/python3.11/site-packages/llmexport/llmexport.py", line 12, in <module>
    from transformers import AutoConfig, Qwen3VLForConditionalGeneration
ImportError: cannot import name 'Qwen3VLForConditionalGeneration' from 'transformers'
"""

ARGPARSE = """python3 generate_llm_qnn.py --model ./qwen3-0.6b-mnn
usage: generate_llm_qnn.py [-h] --model MODEL --soc_id SOC_ID --dsp_arch DSP_ARCH
generate_llm_qnn.py: error: the following arguments are required: --soc_id, --dsp_arch
"""

CRASH_FIRST = """Step2: Seperate Model
Convert for QNN, QualComn's NPU
Segmentation fault (core dumped)
Traceback (most recent call last):
  File "npu/generate_llm_qnn.py", line 402, in <module>
    convert_qnn(args)
  File "npu/generate_llm_qnn.py", line 330, in convert_qnn
    raise RuntimeError("compilefornpu failed")
RuntimeError: compilefornpu failed
"""

OWN_SCRIPT = """my flask wrapper around the chat model fails on startup:
Traceback (most recent call last):
  File "/srv/chat/app.py", line 42, in <module>
    cfg = json.load(open(sys.argv[2]))
IndexError: list index out of range
"""


@pytest.mark.parametrize("log", [USER_VL_REFUSAL, LLMEXPORT_IMPORT, ARGPARSE], ids=["vl-refusal", "llmexport-import", "argparse"])
def test_a_script_error_of_mnns_tools_is_its_own_class_and_leads_to_llm_check(log: str) -> None:
    r = triage_log(text=log)
    assert r.category == "export_script_error" and not r.low_confidence, (r.category, r.hypotheses)
    assert r.next_steps[0].tool == "check_llm_export" and r.next_steps[0].cli.startswith("qnn-debug llm-check")
    assert not any("gdb" in (s.cli or "") + s.why for s in r.next_steps)
    assert any(e.signature == "export-tool-error" for e in r.evidence)


QNN_THROUGH_PYMNN = """running the model from python with the QNN backend:
Traceback (most recent call last):
  File "/home/u/app/run.py", line 20, in <module>
    out = net.forward(x)
  File "/usr/lib/python3.11/site-packages/MNN/nn/__init__.py", line 84, in forward
    return self._forward(inputs)
RuntimeError: QNN graph finalize failed, error code 1002
"""


def test_a_crash_before_the_traceback_keeps_its_category_and_an_own_script_stays_other() -> None:
    assert triage_log(text=CRASH_FIRST).category == "convert_segfault"
    assert triage_log(text=OWN_SCRIPT).category == "other"
    # a QNN failure raised through MNN's Python package is that failure, not a script refusing its input
    assert triage_log(text=QNN_THROUGH_PYMNN).category == "finalize_failed_1002"


def test_cli_names_the_class_and_llm_check(tmp_path: Path) -> None:
    log = tmp_path / "vl.log"
    log.write_text(USER_VL_REFUSAL)
    res = CliRunner().invoke(app, ["triage", str(log)])
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("export_script_error") and "LOW CONFIDENCE" not in res.output
    assert "qnn-debug llm-check" in res.output.split("next steps:")[1].splitlines()[1]
    js = subprocess.run([sys.executable, "-m", "qnn_debug", "triage", "--json", str(log)], capture_output=True,
                        text=True, check=False)
    assert json.loads(js.stdout)["category"] == "export_script_error"


def _part(name: str) -> float:
    cases = json.loads((ROUND9 / name / "manifest.json").read_text(encoding="utf-8"))["cases"]
    return sum(triage_log(ROUND9 / name / c["file"]).category == c["expected"] for c in cases) / len(cases)


def test_round9_fresh_reports_tuning_and_heldout(capsys: pytest.CaptureFixture[str]) -> None:
    tuning, held = _part("tuning"), _part("heldout")
    with capsys.disabled():
        print(f"\ntriage round 9: tuning {tuning:.1%}, held-out {held:.1%} (goal 90%)")
    assert tuning >= TUNING_FLOOR and held >= HELDOUT_FLOOR


def test_round9_parts_are_split_by_the_fixed_rule_and_labelled_in_the_categories() -> None:
    import hashlib

    from qnn_debug.triage.signatures import CATEGORIES

    seen: set[str] = set()
    for name, first in (("tuning", "01234567"), ("heldout", "89abcdef")):
        for c in json.loads((ROUND9 / name / "manifest.json").read_text(encoding="utf-8"))["cases"]:
            assert hashlib.sha1(c["id"].encode()).hexdigest()[0] in first and c["id"] not in seen
            assert c["expected"] in CATEGORIES and c["source"].startswith("https://github.com/")
            seen.add(c["id"])
    assert len(seen) >= 36


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_triage_log_routes_the_script_error_to_check_llm_export(tmp_path: Path) -> None:
    from test_mcp_support import connect, ok

    async with connect(tmp_path, "auto") as client:
        answer = ok(await client.call_tool("triage_log", {"log_text": USER_VL_REFUSAL}))
    assert answer["category"] == "export_script_error" and not answer["low_confidence"]
    assert answer["next_steps"][0]["tool"] == "check_llm_export"
