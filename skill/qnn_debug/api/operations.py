"""The registry of public operations: which request and result model each one has, and its code.

Importing this module imports the request and result models only (pydantic, no numpy/onnx/MNN);
each operation's code is named as ``"module:function"`` and imported when the operation runs.
"""

from __future__ import annotations

from ..baseline_models import BaselineResult
from ..compare.schema import CompareResult
from ..device.probe import ProbeResult
from ..device_models import DevicesResult, ImportResult, RunModelResult
from ..diagnose_models import DiagnoseResult
from ..dump_models import DumpResult
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

RUNNERS = "qnn_debug.api.runners"

register(Operation("triage", TriageRequest, TriageResult, f"{RUNNERS}:triage",
                   summary="classify a failing run's log and say what to run next"))
register(Operation("op_lookup", OpLookupRequest, OpConstraints, f"{RUNNERS}:op_lookup",
                   summary="QNN/HTP constraints of an op, optionally probed on the simulator"))
register(Operation("baseline", BaselineRequest, BaselineResult, f"{RUNNERS}:baseline", long=True,
                   summary="trusted CPU baseline: fp32 reference, fp16 floor and the MNN CPU gate, every tensor"))
register(Operation("dump", DumpRequest, DumpResult, f"{RUNNERS}:dump", long=True,
                   summary="every intermediate tensor of a model on a QNN target, refusing any CPU fallback"))
register(Operation("compare", CompareRequest, CompareResult, f"{RUNNERS}:compare", long=True,
                   summary="a target run against the baseline tensor by tensor: first failing op and verdict"))
register(Operation("diagnose", DiagnoseRequest, DiagnoseResult, f"{RUNNERS}:diagnose", long=True,
                   summary="baseline, dump and compare in one go"))
register(Operation("bisect", BisectRequest, BisectResult, f"{RUNNERS}:bisect", long=True,
                   summary="first failing op by truncating the model, when no dump is possible"))
register(Operation("localise_blocks", LocaliseBlocksRequest, BlockResult, f"{RUNNERS}:localise_blocks", long=True,
                   summary="first failing decoder block of an LLM, then the first failing op inside it"))
register(Operation("llm_check", LlmCheckRequest, LlmCheckResult, f"{RUNNERS}:llm_check",
                   summary="static check of an llmexport folder for the QNN LLM path"))
register(Operation("llm_text", LlmTextRequest, LlmTextResult, f"{RUNNERS}:llm_text", long=True,
                   summary="an LLM's text and logits against MNN's CPU reference"))
register(Operation("run", RunRequest, RunModelResult, f"{RUNNERS}:run", long=True,
                   summary="an .mnn model with MNN's ModuleBasic on a phone or a host build, judged against a reference"))
register(Operation("testdir", TestDirRequest, TestDirInfo, f"{RUNNERS}:testdir",
                   summary="write an MNN test dir (input.json + <tensor>.txt) for ModuleBasic"))
register(Operation("toggle_shape_mutable", ToggleShapeMutableRequest, ToggleResult, f"{RUNNERS}:toggle_shape_mutable",
                   summary="set or flip shapeMutable in a test dir's input.json (atomic, previous file kept)"))
register(Operation("import_dump", ImportDumpRequest, ImportResult, f"{RUNNERS}:import_dump", long=True,
                   summary="import an MNN QNN dump directory as a run compare reads"))
register(Operation("devices", DevicesRequest, DevicesResult, f"{RUNNERS}:devices",
                   summary="the phones adb sees and their state"))
register(Operation("probe_device", ProbeDeviceRequest, ProbeResult, f"{RUNNERS}:probe_device",
                   summary="a phone's SoC, HTP arch and the MNN/QNN runtime files it lacks (with the adb push for each)"))
register(Operation("case_add", CaseAddRequest, CaseFile, f"{RUNNERS}:case_add",
                   summary="append one solved case to the cases file triage reads"))
