"""The registry of public operations: which request and result model each one has, and its code.

Importing this module imports the request and result models only (pydantic, no numpy/onnx/MNN);
each operation's code is named as ``"module:function"`` and imported when the operation runs.
"""

from __future__ import annotations

from pydantic import BaseModel

from ..baseline_models import BaselineResult
from ..compare.schema import CompareResult
from ..compare.targets_models import TargetsComparison
from ..device.probe import ProbeResult
from ..device_models import DevicesResult, ImportResult, RunModelResult
from ..diagnose_models import DiagnoseResult
from ..dump_models import DumpResult
from ..fix.models import FixResult
from ..llm.check_models import LlmCheckResult
from ..llm.text_models import LlmTextResult
from ..localise.models import BisectResult, BlockResult
from ..mnn.models import TestDirInfo, ToggleResult
from ..ops.models import OpConstraints
from ..triage.cases import CaseFile
from ..triage.models import TriageResult
from . import Operation, register
from .requests import (
    BaselineRequest,
    BisectRequest,
    CaseAddRequest,
    CompareRequest,
    DevicesRequest,
    DiagnoseRequest,
    DumpRequest,
    FixRequest,
    ImportDumpRequest,
    LlmCheckRequest,
    LlmTextRequest,
    LocaliseBlocksRequest,
    OpLookupRequest,
    ProbeDeviceRequest,
    RunRequest,
    TestDirRequest,
    ToggleShapeMutableRequest,
    TriageRequest,
)
from .requests_targets import CompareTargetsRequest

RUNNERS = "qnn_debug.api.runners"

# name, request, result, long (minutes: faces run it in a child / as a job), summary; the runner is runners.<name>
TABLE: list[tuple[str, type[BaseModel], type[BaseModel], bool, str]] = [
    ("triage", TriageRequest, TriageResult, False, "classify a failing run's log and say what to run next"),
    ("op_lookup", OpLookupRequest, OpConstraints, False, "QNN/HTP constraints of an op, optionally probed on the simulator"),
    ("baseline", BaselineRequest, BaselineResult, True, "trusted CPU baseline: fp32 reference, fp16 floor and the MNN CPU gate, every tensor"),
    ("dump", DumpRequest, DumpResult, True, "every intermediate tensor of a model on a QNN target, refusing any CPU fallback"),
    ("compare", CompareRequest, CompareResult, True, "a target run against the baseline tensor by tensor: first failing op and verdict"),
    ("compare_targets", CompareTargetsRequest, TargetsComparison, True, "two runs of one model on two targets (host MNN vs htp-sim), each against the baseline, located tensor by tensor"),
    ("diagnose", DiagnoseRequest, DiagnoseResult, True, "baseline, dump and compare in one go"),
    ("bisect", BisectRequest, BisectResult, True, "first failing op by truncating the model, when no dump is possible"),
    ("localise_blocks", LocaliseBlocksRequest, BlockResult, True, "first failing decoder block of an LLM, then the first failing op inside it"),
    ("llm_check", LlmCheckRequest, LlmCheckResult, False, "static check of an llmexport folder for the QNN LLM path"),
    ("llm_text", LlmTextRequest, LlmTextResult, True, "an LLM's text and logits against MNN's CPU reference"),
    ("run", RunRequest, RunModelResult, True, "an .mnn model with MNN's ModuleBasic on a phone or a host build, judged against a reference"),
    ("testdir", TestDirRequest, TestDirInfo, False, "write an MNN test dir (input.json + <tensor>.txt) for ModuleBasic"),
    ("toggle_shape_mutable", ToggleShapeMutableRequest, ToggleResult, False, "set or flip shapeMutable in a test dir's input.json (atomic, previous file kept)"),
    ("import_dump", ImportDumpRequest, ImportResult, True, "import an MNN QNN dump directory as a run compare reads"),
    ("devices", DevicesRequest, DevicesResult, False, "the phones adb sees and their state"),
    ("probe_device", ProbeDeviceRequest, ProbeResult, False, "a phone's SoC, HTP arch and the MNN/QNN runtime files it lacks (with the adb push for each)"),
    ("case_add", CaseAddRequest, CaseFile, False, "append one solved case to the cases file triage reads"),
    ("fix", FixRequest, FixResult, True, "write the fix for a verdict next to the user's file and prove it (fp16 rescale, shapeMutable)"),
]

for _name, _request, _result, _long, _summary in TABLE:
    register(Operation(_name, _request, _result, f"{RUNNERS}:{_name}", long=_long, summary=_summary))
