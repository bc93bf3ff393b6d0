"""Op lookup offline (curated knowledge + MNN's OpType table) and with SDK-shaped fixture folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qnn_debug.cli import app
from qnn_debug.errors import BadInputError
from qnn_debug.mnn.optypes import optype_name, optype_number, qnn_mapping, qnn_mappings
from qnn_debug.ops import lookup_op_constraints

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SDK_NEW = FIXTURES / "fake_qnn_sdk_2_40_0"
SDK_OLD = FIXTURES / "fake_qnn_sdk_2_20_0"


def test_optype_table_matches_mnn_enum() -> None:
    assert optype_name(17) == "Deconvolution"
    assert optype_name(0) == "AbsVal" and optype_name(256) == "Plugin" and optype_name(305) == "LinearAttention"
    assert optype_number("ReLU6") == 70 and optype_number("OpType_Attention") == 299 and optype_number("17") == 17
    assert qnn_mapping("LinearAttention") is None
    assert qnn_mapping(17) is not None and qnn_mapping(17).qnn_ops == ["TransposeConv2d"]  # type: ignore[union-attr]
    assert len(qnn_mappings()) == 41  # REGISTER_QNN_OP_CREATOR calls in registerQNNOps at 4d40bdb
    for bad in (9999, "NoSuchOp"):
        with pytest.raises(BadInputError):
            optype_number(bad)


def test_lookup_by_mnn_number_onnx_and_qnn_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    deconv = lookup_op_constraints(17)
    assert deconv.mnn[0].optype == "Deconvolution" and deconv.qnn[0].name == "TransposeConv2d"
    assert any("pull/4712" in f.source for f in deconv.facts)
    conv2d = lookup_op_constraints("conv2d")
    assert conv2d.kinds == ["qnn"] and conv2d.mnn[0].optype == "Convolution"
    assert conv2d.qnn[0].params == ["stride", "pad_amount", "group", "dilation"]
    strided = lookup_op_constraints("StridedSlice")
    traps = " ".join(f.text for f in strided.facts)
    assert "QnnFloatToHalf" in traps and "--max_history_token 0" in traps
    prelu = lookup_op_constraints("PRelu")
    assert prelu.mnn[0].optype == "PReLU" and prelu.mnn[0].creator is None
    assert all(f.source for f in prelu.facts) and prelu.sources


def test_unknown_op_is_bad_input_with_suggestions() -> None:
    with pytest.raises(BadInputError) as err:
        lookup_op_constraints("Convolutoin")
    assert "Convolution" in err.value.details["suggestions"]
    res = CliRunner().invoke(app, ["op", "NotAnOp", "--json"])
    assert res.exit_code == 2 and json.loads(res.stdout)["error"] == "bad_input"
    for bad in ("", "x" * 200):
        with pytest.raises(BadInputError):
            lookup_op_constraints(bad)


def test_sdk_header_and_html_docs_are_used() -> None:
    r = lookup_op_constraints("Conv2d", sdk=SDK_NEW)
    assert r.sdk is not None and not r.sdk.notes
    q = r.qnn[0]
    assert "reuse_sparse_indicies" in q.params  # from the fixture header, not the curated file
    assert q.htp_support["HTP"].startswith("Yes")
    assert "NHWC" in q.sdk_sections["MasterOpDef.html"]
    assert "must be static" in q.sdk_sections["HtpOpDefSupplement.html"]
    assert "<h2>" not in q.sdk_sections["MasterOpDef.html"]  # script content is not parsed as markup
    only_sdk = lookup_op_constraints("FixtureOnlyOp", sdk=SDK_NEW)
    assert only_sdk.kinds == ["qnn"] and only_sdk.qnn[0].params == ["gain"]


def test_other_sdk_layout_and_env_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QNN_SDK_ROOT", str(SDK_OLD))
    r = lookup_op_constraints("Softmax")
    assert r.sdk is not None and r.sdk.docs.keys() == {"MasterOpDef.html"}
    assert any("SupportedOps.html not found" in n for n in r.sdk.notes)
    assert r.qnn[0].params == ["beta"] and "older SDK" in r.qnn[0].sdk_sections["MasterOpDef.html"]
    monkeypatch.setenv("QNN_SDK_ROOT", str(FIXTURES / "no_such_sdk"))
    with pytest.raises(BadInputError):
        lookup_op_constraints("Softmax")


def test_cli_json_and_human() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["op", "17", "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["mnn"][0]["optype"] == "Deconvolution"
    human = runner.invoke(app, ["op", "Conv2d", "--sdk", str(SDK_NEW)])
    assert human.exit_code == 0 and "HTP: Yes" in human.stdout and "source:" in human.stdout


@pytest.mark.parametrize("op, words", [("Add", "never reads activationType"), ("BinaryOp", "Max(x, 0)"),
                                       ("ConvTranspose", "QNNDeconvolution does not"), ("17", "Relu/Relu6")])
def test_fused_relu_traps_found_on_the_host_build_are_in_the_lookup(op: str, words: str) -> None:
    """The two fused-Relu losses of MNN's QNN translation (BinaryOp, Deconvolution), each with its source lines."""
    res = CliRunner().invoke(app, ["op", op, "--json"])
    assert res.exit_code == 0, res.output
    facts = [f for f in json.loads(res.stdout)["facts"] if words in f["text"]]
    assert facts and facts[0]["kind"] == "trap" and "alibaba/MNN@4d40bdb" in facts[0]["source"], facts
