"""Failures outside QNN stay ``other`` (rule 4 of the labelling rule book), and what merely looks outside does not.

Every log below was written for this test: a user's script or a config check that raises, an app's own platform
check, a packaging conflict, each with a QNN-flavoured title; and the look-alikes that are QNN failures (a KeyError
in a QNN partitioner, a Python error that carries a QNN status, a script error after a QNN error line).
"""

from __future__ import annotations

import pytest

from qnn_debug.triage import triage_log
from qnn_debug.triage.outside import outside_qnn
from qnn_debug.triage.similar import LabelledLog, build_index

OUTSIDE = [
    # a user's export script indexes past the end of a list (the title says it crashes)
    "Exporting whisper for the QNN NPU crashes my script\n"
    "Traceback (most recent call last):\n"
    '  File "tools/export_npu.py", line 88, in <module>\n'
    "    main()\n"
    '  File "tools/export_npu.py", line 61, in main\n'
    "    chip = matches[0]\n"
    "IndexError: list index out of range\n",
    # a config key the user forgot
    "Running the HTP benchmark script fails after the model is downloaded\n"
    "Traceback (most recent call last):\n"
    '  File "bench/run.py", line 12, in <module>\n'
    '    out = cfg["output_dir"]\n'
    "KeyError: 'output_dir'\n",
    # pydantic validation of a workflow config
    "Olive workflow targeting the QNN EP stops at the config check\n"
    "pydantic.error_wrappers.ValidationError: 1 validation error for RunConfig\n"
    "engine\n"
    "  value is not a valid dict (type=type_error.dict)\n",
    # argparse
    "Cannot start the QNN export\n"
    "usage: export_for_npu.py [-h] --soc SOC [--out OUT]\n"
    "export_for_npu.py: error: the following arguments are required: --soc\n",
    # a packaging conflict: two releases of a helper library in one venv
    "Quantizing for the QNN HTP fails when both toolkits are installed\n"
    '  File "venv/lib/python3.11/site-packages/quanttool/sim.py", line 401, in build\n'
    "    handle = native.wrap(info)\n"
    "TypeError: wrap(): incompatible function arguments. The following argument types are supported:\n"
    "    1. (arg0: capsule) -> int\n"
    "Invoked with: <quanttool.common.Info object at 0x7f31aa90c2d0>\n",
    # a ValueError in the user's preprocessing
    "用 QNN 后端推理之前脚本就报错了\n"
    "Traceback (most recent call last):\n"
    '  File "demo/preprocess.py", line 30, in load\n'
    "    scale = float(row[2])\n"
    "ValueError: could not convert string to float: 'fp16'\n",
    # an app's own allow-list refuses the laptop's CPU before any QNN call
    "[NpuChat] Qualcomm NPU engine is not supported on this device - no supported processor found "
    '{"allowed":["Snapdragon X Elite"],"found":"Snapdragon X Plus"}\n',
]


@pytest.mark.parametrize("text", OUTSIDE)
def test_a_script_config_or_app_error_outside_qnn_is_other(text: str) -> None:
    r = triage_log(text=text)
    assert r.category == "other", r.hypotheses
    assert not r.similar.decided
    assert "outside QNN" in r.title and r.low_confidence_reason and "script" in r.low_confidence_reason
    assert any(e.signature == "outside-qnn" for e in r.evidence)


@pytest.mark.parametrize(("text", "category"), [
    # a KeyError raised in a QNN partitioner: the op has no node visitor
    ('Traceback (most recent call last):\n'
     '  File "site-packages/executorch/backends/qualcomm/partition/qnn_partitioner.py", line 90, in is_node_supported\n'
     "    visitor = self.node_visitors[name]\n"
     "KeyError: 'aten.unfold.default'\n", "unsupported_op_not_registered"),
    # the same told in prose
    ("Lowering torch.cumsum with the QnnPartitioner throws a KeyError\n", "unsupported_op_not_registered"),
    # a Python error that carries a QNN status is a QNN failure
    ("Traceback (most recent call last):\n"
     '  File "app/run.py", line 9, in <module>\n'
     "    sess.prepare()\n"
     "ValueError: QnnGraph_finalize failed: graph finalize failed 1002\n", "finalize_failed_1002"),
    # a script error after a QNN error line: the QNN line keeps the label
    ("QnnDsp <E> could not create op: q::Gather\n"
     "Traceback (most recent call last):\n"
     '  File "demo.py", line 5, in <module>\n'
     "    print(outs[0])\n"
     "IndexError: list index out of range\n", "finalize_failed_1002"),
])
def test_errors_inside_qnn_are_not_outside(text: str, category: str) -> None:
    assert triage_log(text=text).category == category


def test_the_failing_lines_decide_not_the_title() -> None:
    """A QNN word in the title does not put a script error inside QNN; a QNN word in the raising frame does."""
    plain = "QNN export broken\nTraceback (most recent call last):\n  File \"x.py\", line 3, in f\n    a[3]\nIndexError: x\n"
    assert outside_qnn(plain) == (5, "IndexError: x")
    framed = plain.replace('"x.py"', '"backends/qnn/builder.py"')
    assert outside_qnn(framed) is None


def test_similar_threads_stand_back_for_a_script_error() -> None:
    """A log that reads like labelled build failures, but whose failing lines are a plain script error, stays other."""
    words = [f"zeb{a}{b}" for a in "abcdefgh" for b in "pqrstu"][:40]
    logs = [LabelledLog(id=f"b-{i}", category="build_error", url=f"https://github.com/example/b/issues/{i}",
                        text=" ".join(words[i:] + words[:i])) for i in range(3)]
    logs.append(LabelledLog(id="o-0", category="other", url="https://github.com/example/o/issues/0", text="pelican"))
    index = build_index(logs)
    body = " ".join(words[:35]) + "\nthe qnn export failed\n"
    lean = triage_log(text=body, similar=index)
    assert lean.similar.decided and lean.category == "build_error"  # the layer would decide this log
    script = body + "Traceback (most recent call last):\n  File \"e.py\", line 2, in <module>\nIndexError: list index out of range\n"
    r = triage_log(text=script, similar=index)
    assert r.category == "other" and not r.similar.decided
