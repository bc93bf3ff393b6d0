"""``ModuleBasic.out``: its command line, and a parser for everything it prints.

ModuleBasic exits 0 on a usage error, a bad input.json, a load failure, a failed forward and a failed
comparison alike, so the status comes from its output, never from the exit code (only a crash is
non-zero). Its own check compares ``diffmax`` with 1 % of the *signed* running maximum of the reference
(starting at 0), so an all-negative reference fails on any error and a reference dominated by large
negative values passes too easily; :func:`judge` therefore decides against ``max |reference|`` and keeps
MNN's own rate beside it. Each run needs a fresh working directory: ModuleBasic writes
``output/<repeat>_<i>.txt`` relative to its CWD (into an ``output/`` that must already exist) and every
run overwrites ``output/0_0.txt``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np
from pydantic import BaseModel, Field

from ..compare.metrics import error_stats
from ..errors import BadInputError
from .models import ModuleBasicReport, NotRegistered, OutputCheck, QnnErrorLine, Status

FORWARD_TYPES = {"cpu": 0, "opencl": 3, "qnn": 5, "nn": 5, "vulkan": 7}
PRECISIONS = {"normal": 0, "high": 1, "low": 2, "low_bf16": 3}
THRESHOLD = 0.01  # ModuleBasic's and MNNConvert's relative threshold

class ModuleBasicArgs(BaseModel):
    """ModuleBasic's positional arguments (argv[1..10])."""

    model: str
    testdir: str
    run_mask: int = 0
    forward: int = 0
    loops: int = 0
    threads: int = 1
    precision: int = 0  # 0 normal, 1 high, 2 low, 3 low_bf16
    memory: int = 0
    power: int = 0
    cache_file: str | None = None
    cpu_ids: list[int] = Field(default_factory=list)
    kleidiai: bool = False

    @property
    def mask(self) -> int:
        """argv[7]: precision + 4 * memory + 16 * power."""
        return self.precision % 4 + 4 * (self.memory % 4) + 16 * (self.power % 4)


def _named(table: dict[str, int], value: str | int, what: str, hint: str) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    try:
        return table[str(value).lower()]
    except KeyError:
        raise BadInputError(f"unknown {what} {value!r}", hint=hint) from None


def forward_type(name: str | int) -> int:
    """``qnn`` → 5 (MNN_FORWARD_NN, where the QNN online backend registers), ``cpu`` → 0, ``opencl`` → 3."""
    return _named(FORWARD_TYPES, name, "forward type", "use qnn, cpu or opencl (or the MNN number)")


def precision_value(name: str | int) -> int:
    """``low`` → 2 (fp16), ``high`` → 1 (fp32 tensors; the HTP graph still runs in fp16), ``normal`` → 0."""
    return _named(PRECISIONS, name, "precision", "use low, high or normal")


def build_command(executable: str, args: ModuleBasicArgs) -> list[str]:
    """The argument list; later optional arguments force the earlier ones to be written out."""
    argv = [executable, args.model, args.testdir, str(args.run_mask), str(args.forward), str(args.loops),
            str(args.threads), str(args.mask)]
    tail: list[str] = []
    if args.kleidiai:
        tail = ["1"]
    if args.cpu_ids or tail:
        tail = [",".join(str(c) for c in args.cpu_ids) if args.cpu_ids else "", *tail]
    if args.cache_file is not None or tail:
        tail = [args.cache_file or ".tempcache", *tail]
    return argv + tail


# --- parsing ------------------------------------------------------------------------------------------------


_NUM = r"(-?(?:nan|inf|[0-9.]+(?:e[-+]?\d+)?))"
_RE = {
    "test": re.compile(r"Test (.+?) from input info: (.*)$"),
    "fwd": re.compile(r"Use extra forward type: (-?\d+)"),
    "precision": re.compile(r"^precision=(\d+) in main"),
    "run": re.compile(r"^Run for (\d+) time"),
    "before": re.compile(r"^before compare (.*): \(([-\d, ]*)\)"),
    "for": re.compile(rf"^For (.*), max = {_NUM}, diffmax = {_NUM}, diff rate = {_NUM}", re.I),
    "testerror_value": re.compile(r"^TESTERROR (.*) value error ?:"),
    "testerror": re.compile(r"TESTERROR (.*)$"),
    "run_error": re.compile(r"^(\d+) run Error for output (.*)$"),
    "skip": re.compile(r"^Skip check (.*)$"),
    "qnn_error": re.compile(r"Error in file (.*), line (\d+): error code (\d+)"),
    "validate": re.compile(r"Failed to validate binary: (-?\d+)"),
    "cant_find": re.compile(r"Can't Find type=(-?\d+) backend"),
    "not_registered": re.compile(r"MNN_QNN: Not registered type (-?\d+), (.*?)\.?$"),
    "usage": re.compile(r"Tensor usage is (\d+)\."),
    "write": re.compile(r"^Write (.*) output to (\S+)$"),
    "load": re.compile(r"^main, \d+, cost time: ([0-9.]+) ms"),
    "avg": re.compile(rf"Avg= {_NUM} ms, min= {_NUM} ms, max= {_NUM} ms"),
    "memory": re.compile(r"^memoryInMB=f ([0-9.]+) in main"),
}


def parse_output(text: str, returncode: int | None = None) -> ModuleBasicReport:
    """Structure ModuleBasic's stdout+stderr. Lines may be glued (MNN prints without newlines at times)."""
    r = ModuleBasicReport(returncode=returncode)
    repeat = 0
    shapes: dict[str, list[int]] = {}
    in_inputs = False
    for raw_line in text.replace("\r\n", "\n").split("\n"):
        line = raw_line.strip()
        if not line:
            continue
        if m := _RE["test"].search(line):
            r.model, r.testdir, in_inputs = m.group(1), m.group(2), True
            continue
        if line.startswith("output: "):
            r.outputs.append(line[len("output: "):])
            in_inputs = False
            continue
        if m := _RE["fwd"].search(line):
            r.forward_type, in_inputs = int(m.group(1)), False
            continue
        if in_inputs and line not in ("Invalid json",) and "input.mnn" not in line:
            r.inputs.append(line)
            continue
        _parse_line(r, line, shapes, repeat)
        if m := _RE["run"].match(line):
            repeat = int(m.group(1))
    return r


def _parse_line(r: ModuleBasicReport, line: str, shapes: dict[str, list[int]], repeat: int) -> None:
    if m := _RE["precision"].match(line):
        r.precision = int(m.group(1))
    elif m := _RE["before"].match(line):
        shapes[m.group(1)] = [int(d) for d in m.group(2).replace(" ", "").split(",") if d]
    elif m := _RE["for"].match(line):
        name = m.group(1)
        r.checks.append(OutputCheck(name=name, repeat=repeat, shape=shapes.get(name, []), mnn_max=float(m.group(2)),
                                    diffmax=float(m.group(3)), mnn_diff_rate=float(m.group(4))))
    elif m := _RE["testerror_value"].match(line):
        r.test_errors.append(line)
        for c in reversed(r.checks):
            if c.name == m.group(1) and c.repeat == repeat:
                c.mnn_failed = True
                break
    elif _RE["testerror"].search(line) or _RE["run_error"].match(line):
        r.test_errors.append(line)
    elif m := _RE["skip"].match(line):
        r.skipped_checks.append(m.group(1))
    elif m := _RE["qnn_error"].search(line):
        r.qnn_errors.append(QnnErrorLine(code=int(m.group(3)), source_file=m.group(1), source_line=int(m.group(2)), text=line))
    elif "graphExecute failed" in line:
        r.graph_execute_failed += 1
    elif "graphFinalize failed" in line:
        r.graph_finalize_failed = True
    elif m := _RE["validate"].search(line):
        r.validate_binary_failed.append(int(m.group(1)))
    elif m := _RE["cant_find"].search(line):
        r.missing_backends.append(int(m.group(1)))
    elif m := _RE["not_registered"].search(line):
        r.not_registered.append(NotRegistered(type_id=int(m.group(1)), op=m.group(2), type_name=_optype(int(m.group(1)))))
    elif m := _RE["usage"].search(line):
        r.tensor_usage.append(int(m.group(1)))
    elif m := _RE["write"].match(line):
        r.written.setdefault(m.group(1), []).append(m.group(2))
    elif m := _RE["load"].match(line):
        r.load_ms = float(m.group(1))
    elif m := _RE["avg"].search(line):
        r.avg_ms, r.min_ms, r.max_ms = float(m.group(1)), float(m.group(2)), float(m.group(3))
    elif m := _RE["memory"].match(line):
        r.memory_mb = float(m.group(1))
    elif line.startswith("stateNumber="):
        r.offline_plugin = True
    elif "Usage: ./ModuleBasic.out" in line:
        r.usage_printed = True
    elif line == "Invalid json":
        r.invalid_json = True
    elif "Error: can't load module" in line:
        r.load_failed = True
    elif line == "Error in forward":
        r.forward_error = True


def _optype(type_id: int) -> str | None:
    from .optypes import optype_name

    try:
        return optype_name(type_id)
    except BadInputError:
        return None


# --- judging ------------------------------------------------------------------------------------------------


def judge(
    report: ModuleBasicReport,
    *,
    references: Mapping[str, np.ndarray] | None = None,
    outputs: Mapping[str, np.ndarray] | None = None,
    expected_forward: int | None = None,
    threshold: float = THRESHOLD,
) -> ModuleBasicReport:
    """Decide ``status``: a crash or a load/forward error first, then QNN errors, then the numbers.

    With references, each output passes iff ``diffmax <= threshold * max|reference|`` (``diffmax``
    recomputed from ``outputs`` when given, else MNN's printed one). Without references, MNN's own
    TESTERROR decides and the status says it was not checked when nothing was compared.
    """
    rc = report.returncode
    if rc not in (None, 0):
        return _set(report, "crashed", f"ModuleBasic exited with status {rc}" + (" (signal)" if rc < 0 or rc > 128 else ""))
    if report.usage_printed:
        return _set(report, "error", "ModuleBasic printed its usage: too few arguments")
    if report.invalid_json:
        return _set(report, "error", "ModuleBasic could not read the test dir's input.json ('Invalid json')")
    if report.load_failed:
        return _set(report, "error", "ModuleBasic could not load the model ('Error: can't load module')")
    if report.forward_error:
        return _set(report, "error", "the forward pass returned no outputs ('Error in forward')")
    if expected_forward is not None and expected_forward in report.missing_backends:
        return _set(report, "error", f"backend type {expected_forward} is not in this MNN build; MNN ran on another backend "
                    "(\"Can't Find type=... backend\") — the numbers are not from QNN")
    report.judged = []
    failures: list[str] = []
    for name in report.outputs or sorted({c.name for c in report.checks}):
        checks = [c for c in report.checks if c.name == name]
        ref = None if references is None else references.get(name)
        if ref is None:
            if any(c.mnn_failed for c in checks):
                failures.append(f"{name}: MNN's check failed (TESTERROR)")
            continue
        ref = np.asarray(ref, dtype=np.float64).reshape(-1)
        abs_max = float(np.max(np.abs(ref))) if ref.size else 0.0
        got = None if outputs is None else outputs.get(name)
        if got is not None and np.asarray(got).size == ref.size:
            diffmax = _diffmax(np.asarray(got), ref)
            source = "output file"
        elif checks:
            diffmax = max(c.diffmax for c in checks)
            source = "ModuleBasic's printed diffmax"
        else:
            failures.append(f"{name}: no output to compare")
            continue
        rate = diffmax / max(abs_max, 1e-6)
        ok = bool(np.isfinite(rate) and rate <= threshold)
        report.judged.append({"name": name, "max_abs_reference": abs_max, "diffmax": diffmax, "rel_error": rate,
                              "mnn_diff_rate": max((c.mnn_diff_rate for c in checks), default=None),
                              "mnn_failed": any(c.mnn_failed for c in checks), "passed": ok, "source": source})
        if not ok:
            failures.append(f"{name}: diffmax {diffmax:.6g} is {rate:.4g} of max|reference| {abs_max:.6g} (limit {threshold})")
    qnn = _qnn_problem(report)
    if qnn:
        return _set(report, "failed", "; ".join([qnn, *failures]))
    if failures:
        return _set(report, "failed", "; ".join(failures))
    if not report.judged and not any(c for c in report.checks):
        return _set(report, "unchecked", "no reference outputs were compared")
    if not report.judged:
        return _set(report, "passed", "MNN's own check passed (judged by its signed max: no references given)")
    return _set(report, "passed", f"{len(report.judged)} output(s) within {threshold} of max|reference|")


def _diffmax(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| by the project's one comparator, in float64; NaN (or inf) when a value is not finite,
    so such an output never passes."""
    stats = error_stats(got, ref, wide=True)
    if stats.t_nan or stats.r_nan:
        return math.nan
    if stats.t_inf or stats.r_inf:
        return math.inf
    return stats.max_abs_d


def _qnn_problem(report: ModuleBasicReport) -> str:
    parts = []
    if report.qnn_errors:
        codes = sorted({e.code for e in report.qnn_errors})
        parts.append(f"QNN returned error code(s) {', '.join(map(str, codes))}")
    if report.graph_execute_failed:
        parts.append(f"graphExecute failed {report.graph_execute_failed} time(s)")
    if report.graph_finalize_failed:
        parts.append("graphFinalize failed")
    if report.validate_binary_failed:
        parts.append("the QNN context binary failed validation")
    if report.tensor_usage:
        parts.append("'Tensor usage is N.': a non-constant tensor was baked in as a constant")
    return "; ".join(parts)


def _set(report: ModuleBasicReport, status: Status, reason: str) -> ModuleBasicReport:
    report.status = status
    report.reason = reason
    return report
