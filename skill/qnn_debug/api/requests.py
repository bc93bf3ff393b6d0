"""Request models of the public operations: field names, types, limits and help, declared once.

The MCP tool of an operation takes exactly these fields as its arguments (plus server-only ones such
as ``background``); the CLI command reads them from its flags (:class:`~.fields.Cli`). Paths are
plain strings marked with :class:`~.fields.PathRole`, so the server can confine them before use.

The models live in modules by job (:mod:`.request_base`, :mod:`.requests_workflow`, :mod:`.requests_llm`,
:mod:`.requests_mnn`); this module holds triage, op lookup, cases and fix, and re-exports them all so the public
import path ``qnn_debug.api.requests`` keeps working.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..errors import BadInputError
from ..mnn.soc import DEFAULT_SOC, default_soc_help
from .fields import Cli, PathRole
from .options import TargetOptions, parse_option_pairs
from .request_base import (
    MAX_LOG_CHARS,
    QNN_TARGETS,
    Force,
    Out,
    Request,
    Soc,
    TargetRun,
    Timeout,
    out_leaf,
    out_stem,
)
from .requests_llm import LlmCheckRequest, LlmTextRequest
from .requests_mnn import (
    DevicesRequest,
    ImportDumpRequest,
    ProbeDeviceRequest,
    RunRequest,
    TestDirRequest,
    ToggleShapeMutableRequest,
    bool_word,
)
from .requests_targets import CompareTargetsRequest
from .requests_workflow import (
    BaselineRequest,
    BisectRequest,
    CompareRequest,
    DiagnoseRequest,
    DumpRequest,
    LocaliseBlocksRequest,
)

__all__ = [
    "MAX_LOG_CHARS", "QNN_TARGETS", "BaselineRequest", "BisectRequest", "CaseAddRequest", "CompareRequest",
    "CompareTargetsRequest", "DevicesRequest", "DiagnoseRequest", "DumpRequest", "FixRequest", "ImportDumpRequest",
    "LlmCheckRequest",
    "LlmTextRequest", "LocaliseBlocksRequest", "OpLookupRequest", "ProbeDeviceRequest", "Request", "RunRequest",
    "TargetRun", "TestDirRequest", "ToggleShapeMutableRequest", "TriageRequest", "bool_word", "out_leaf", "out_stem",
    "parse_attr_pairs", "parse_range_args",
]


class TriageRequest(Request):
    """A log to classify: a file (``log_path``) or the text itself (``log_text``), and past solved cases."""

    log_text: Annotated[str | None, Cli(hidden=True), Field(
        default=None, max_length=MAX_LOG_CHARS, description="The log itself (stdout+stderr of the failing run)")] = None
    log_path: Annotated[str | None, PathRole("file"), Cli(positional=True, default="-"), Field(
        default=None, max_length=4096,
        description="A log file (MNN stdout, QNN/ORT log, logcat, gdb backtrace; any size; '-' reads stdin); give "
        "this or log_text")] = None
    cases_path: Annotated[str | None, PathRole("file"), Cli(flag="--cases"), Field(
        default=None, max_length=4096,
        description="Cases file of past solved problems (JSON lines written by `qnn-debug case-add`); default: "
        "qnn-debug-cases.jsonl in the working folder when it exists")] = None


ProbeShape = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[0-9x]+(:[a-z0-9]+)?(=[-0-9.,eE+]*)?$")]


def parse_attr_pairs(pairs: list[str] | None) -> dict[str, str]:
    """``--attr key=value`` (repeatable) as the dict the probe takes; values keep their text (``1,1``)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise BadInputError(f"bad --attr {pair!r}", hint="use key=value, e.g. --attr axis=1 or --attr pads=1,1,1,1")
        out[key.strip()] = value.strip()
    return out


class OpLookupRequest(Request):
    """An op to look up (MNN OpType name or number, ONNX op or QNN op) and, optionally, a simulator probe."""

    op: Annotated[str, Cli(positional=True), Field(
        min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]*$",
        description="MNN OpType name or number (e.g. Convolution or 17), ONNX op (Conv) or QNN op (Conv2d)")]
    probe: Annotated[bool, Cli(flag="--probe"), Field(
        description="also build a one-op ONNX graph and try it on the HTP simulator (takes seconds)")] = False
    shapes: Annotated[list[ProbeShape] | None, Cli(flag="--shape", metavar="DIMS[:DTYPE][=V1,...]"), Field(
        default=None, max_length=8, description="probe inputs, one per input: DIMS[:DTYPE][=V1,...], e.g. "
        "1x64x56x56:float32; later inputs become constants")] = None
    attrs: Annotated[dict[Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                          Annotated[str, Field(max_length=200)]] | None,
                     Cli(flag="--attr", parse=parse_attr_pairs, metavar="KEY=VALUE"), Field(
        default=None, max_length=32, description='probe ONNX attributes, e.g. {"kernel_shape": "3,3"} (on the '
        "command line --attr kernel_shape=3,3, repeatable)")] = None
    soc: Annotated[int, Cli(flag="--soc"), Field(
        ge=1, le=1000, description=f"soc_model of the probe ({default_soc_help()}; 30 = fp32-accurate check)")] = DEFAULT_SOC
    sdk: Annotated[str | None, PathRole("dir", role="exec"), Cli(flag="--sdk"), Field(
        default=None, max_length=4096, description="QNN/QAIRT SDK root with headers and HTML docs (default: "
        "$QNN_SDK_ROOT)")] = None
    opset: Annotated[int, Cli(flag="--opset"), Field(ge=7, le=30, description="ONNX opset of the probe graph")] = 20




class CaseAddRequest(Request):
    """One solved problem to append to the cases file that triage reads."""

    category: Annotated[str, Cli(flag="--category"), Field(
        min_length=1, max_length=64, description="Triage category of the solved problem (e.g. convert_segfault)")]
    match: Annotated[str, Cli(flag="--match"), Field(
        min_length=1, max_length=300, description="A literal log line (or part of one) that identifies this problem")]
    cause: Annotated[str, Cli(flag="--cause"), Field(
        min_length=1, max_length=600, description="One sentence: what it really was")]
    fix: Annotated[str, Cli(flag="--fix"), Field(
        min_length=1, max_length=600, description="One sentence: what fixed it (command, flag, patch)")]
    source: Annotated[str, Cli(flag="--source"), Field(
        max_length=300, description="Issue URL, commit or run that confirmed it")] = ""
    cases: Annotated[str, PathRole("file"), Cli(flag="--cases"), Field(
        min_length=1, max_length=4096, description="Cases file to append to (created if absent)")] = "qnn-debug-cases.jsonl"


# --- fix: the fixed artefact for a verdict, proven --------------------------------------------------------

def parse_range_args(pairs: list[str] | None) -> dict[str, list[float]] | None:
    """``--input-range x=0:255`` (repeatable) as ``{"x": [0.0, 255.0]}``."""
    if not pairs:
        return None
    out: dict[str, list[float]] = {}
    for pair in pairs:
        name, sep, span = pair.rpartition("=")
        lo, colon, hi = span.partition(":")
        try:
            if not (sep and colon and name):
                raise ValueError(pair)
            out[name] = [float(lo), float(hi)]
        except ValueError:
            raise BadInputError(f"bad --input-range {pair!r}", hint="use NAME=MIN:MAX, e.g. --input-range x=0:255") from None
    return out


class FixRequest(Request):
    """A comparison whose verdict to fix: the fixed artefact is written next to the user's file and proven."""

    result: Annotated[str, PathRole("any", as_given=True), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The verdict to fix: a diagnose --out folder, its report/ "
        "folder, a compare JSON file (compare --json FILE), or an llmexport folder / its llm-check JSON")]
    model: Annotated[str | None, PathRole("file"), Cli(flag="--model"), Field(
        default=None, max_length=4096, description="The .onnx to fix (default: the one the comparison names)")] = None
    input_range: Annotated[
        dict[Annotated[str, Field(min_length=1, max_length=256)],
             Annotated[list[float], Field(min_length=2, max_length=2)]] | None,
        Cli(flag="--input-range", parse=parse_range_args, metavar="NAME=MIN:MAX"), Field(
            default=None, max_length=64, description='Declared range of each float input, e.g. {"x": [0, 255]} for raw '
            "pixels (on the command line x=0:255, repeatable): the rescale is sized from the worst case over it; "
            "default: the sample input's own min..max")] = None
    test_dir: Annotated[str | None, PathRole("dir"), Cli(flag="--test-dir"), Field(
        default=None, max_length=4096, description="input_not_copied: the ModuleBasic test dir the run used (its "
        "input.json gets shapeMutable false, the previous file kept)")] = None
    op: Annotated[str | None, Cli(flag="--op"), Field(
        default=None, max_length=64, description="Rescale every scale-invariant region of this kind instead of the "
        "verdict's one site: LayerNorm (each LayerNorm's input by 2^-k, its eps by 2^-2k, fused or decomposed), so "
        "the model is fp16-safe whether the converter fuses it or not")] = None
    out: Out = Field(None, description="Folder of the proof runs (default: qnn-debug-runs/RESULT/fix)")
    soc: Soc = DEFAULT_SOC
    options: Annotated[TargetOptions | None, Cli(flag="--option", parse=parse_option_pairs, repeat=True, spread=True,
                                                 metavar="KEY=VALUE"), Field(
        default=None, description="A host MNN build to prove a fix of MNN's QNN translation on (mnn_build_dir, "
        "qnn_lib_dir, qnn_sdk; on the command line --option key=value): the fixed model is diagnosed on it")] = None
    cases: Annotated[str | None, PathRole("file"), Cli(flag="--cases", default="qnn-debug-cases.jsonl"), Field(
        default=None, max_length=4096, description="Cases file that gets the solved case once every proof check "
        "passed (created if absent; triage reads it); the command line's default is qnn-debug-cases.jsonl")] = None
    timeout: Timeout = 1800.0
    force: Force = False

    def default_out(self) -> tuple[str, str] | None:
        return out_stem(self.result), "fix"
