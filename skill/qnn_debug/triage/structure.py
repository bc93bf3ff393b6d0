"""Runtime-independent triage layers: what a QNN failure line is made of, not how one runtime words it.

Why: every new runtime (ORT, ExecuTorch, LiteRT, llama.cpp, Genie, MNN) words the same failure its own way, so
wording signatures written from past logs keep missing new ones. The grammar they share is stable: a QNN status
enum or number (its API family names the object), a FastRPC/DSP error, "<verb> failed" + the QNN object, "not
supported" + an op or dtype, a version/ABI mismatch, a missing Python module, a crash. The rules and their sources
live in ``data/triage_structure.json``. Only lines holding a cheap literal anchor are read, at most
``max_lines_per_anchor`` per anchor and chunk, so a huge log costs a bounded amount of work here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .signatures import CATEGORIES

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DATA_FILE = DATA_DIR / "triage_structure.json"

# Literal anchors: a line is read by the structure layers only if it holds one of these.
ANCHORS = ("ail", "AIL", "rror", "RROR", "nable to", "annot", "an't", "ould not", "ouldn't", "upported", "UPPORTED",
           "ismatch", "ncompatib", "QNN_", "AEE_", "0x8000", "egmentation", "egfault", "SIGSEGV", "SIGABRT", "SIGBUS",
           "ore dumped", "ombstone", "atal signal", "ModuleNotFoundError", "ImportError", "exit code 13",
           "not implemented", "No translation", "nknown", "段错误", "核心已转储", "EGMENTATION", "EGFAULT", "eturn",
           "tatus", "ret", "err", "ode", "not match", "xpected", "denied", "not permitted", "EACCES", "EPERM", "no access",
           "权限", "ccess violation", "xC0000", "xc0000", "-107374", "Signals.SIG", "atal Python error", "xit status -",
           "xit code -", "xceed", "not enough", "nsufficient", "too large", "too big", "larger than", "greater than",
           "out of", "overflow", "timed out", "not support", "cos", "COS", "Cos", "SQNR", "SNR", "abs", "compiled", "generated", "built", "newer", "older",
           "ismatch", "does not match", "doesn't match", "iffer",
           "not detected", "not found", "not available", "not present", "navailable", "issing", "No NPU", "no NPU",
           "rc=", "rc:", "rc =", "GENIE_STATUS_ERROR", "t supported", "t yet supported",
           "erminated", "illed by", "ied with", "xited with", "borted",
           "t compatible")

_SUCCESS = re.compile(r"(?i)\bsuccess(?:fully|ful)?\b|\bsucceed(?:ed|s)?\b|without (?:any )?(?:issues?|errors?|problems?)"
                      r"|\bworks? (?:fine|well)\b")
_FAIL_VERB = re.compile(r"(?i)\b(?:fail(?:ed|s|ure|ing)?|unable to|cannot|can't|can not|could not|couldn't|not able to)\b")
_FAIL = re.compile(r"(?i)\b(?:fail(?:ed|s|ure|ing)?|unable to|cannot|can't|can not|could not|couldn't|not able to|error|timed out)\b")
_ENUM = re.compile(r"\bQNN_(?P<family>GRAPH|CONTEXT|BACKEND|DEVICE|OP_PACKAGE|TENSOR|COMMON|PROPERTY)_(?P<rest>[A-Z0-9_]+)")
_GENIE = re.compile(r"\bGENIE_STATUS_ERROR_(?P<reason>[A-Z_]+)\b")
_ENUM_BARE = re.compile(r"(?<![A-Za-z_])(?:GRAPH|CONTEXT|BACKEND|DEVICE|OP_PACKAGE|TENSOR|COMMON)_ERROR_[A-Z0-9_]+")
_CODE = re.compile(r"\b(?:0x(?P<hex>[0-9a-fA-F]{3,4})|(?P<dec>\d{4,5}))\b")
_FASTRPC = re.compile(r"\bAEE_E\w+|\b0x8000[0-9a-fA-F]{4}\b|\b(?:remote_\w+|rpcmem_\w+|fastrpc\w*|dspqueue_\w+|apps_dev_init"
                      r"|open_dev|I?DspTransport\w*|dlopen_ex|HAP_\w+|adsprpc|cdsprpc)")
_MMAP = re.compile(r"(?i)mmap|memory map|\bmap(?:ping)?\b|\bmunmap")
_UNSUPPORTED = re.compile(r"(?i)(?:\bnot|n't) (?:be |yet |currently |fully )?supported\b|\bnot support\b|\bno support for\b|\bunsupported\b|\bnot implemented\b|\bno translation\b"
                          r"|\bnot registered\b|\bdon'?t support\b|\bdoes not support\b|\bonly supports?\b")
_OP_WORD = re.compile(r"(?i)\b(?:ops?|operators?|nodes?|layers?|dtypes?|data ?types?|datatypes?|types?"
                      r"|u?int(?:4|8|16|32|64)|float(?:16|32|64)?|fp(?:8|16|32)|bf16|bool|QNN_DATATYPE_\w+|aten\.\w+)\b")
_CAMEL = re.compile(r"\b[A-Z][A-Za-z0-9]+\b")
_VERSION_NOUN = re.compile(r"(?i)\b(?:versions?|ABI|BinaryInfo|build ?id|lib id|API)\b")
_API_CALL = re.compile(r"\bQnn(?P<call>[A-Z][a-z]+_[a-z]\w*)\b[^\n]{0,60}?(?:return\w*|fail\w*|error|err|status|=|:)"
                       r"(?:\W{0,4}(?:with|code|error|err|status|value|of))*\W{0,4}(?P<code>0x[0-9a-fA-F]+|\d+)\b")
_CAPACITY_NOUN = re.compile(r"(?i)\b(?:VTCM|TCM|memory|RAM|heap|buffers?|spill ?fill)\b")
_CAPACITY_BAD = re.compile(r"(?i)\bexceed\w*|\bnot enough\b|\binsufficient\b|\btoo (?:large|big|small)\b|\b(?:larger|greater|bigger) than\b"
                           r"|\bout of\b|\bno (?:more )?(?:free )?space\b|\bexhaust\w*|\boverflow\w*"
                           r"|\b(?:allocat\w*|mmap|memory map(?:ping)?|mapping)\W+(?:\w+\W+){0,2}?(?:fail\w*|errors?)\b"
                           r"|\b(?:fail\w*|unable|cannot|can't|could not|couldn't) (?:to )?(?:allocate|map)\b")
# A line that asks whether something can be done ("Can we delegate the unsupported ops to the CPU?"): a question, not
# a runtime refusing an op.
_CAN_QUESTION = re.compile(r"(?i)^\W*(?:can|could|is it possible|is there (?:a|any) way|how (?:can|do|to|should|would))\b[^?\n]{0,300}\?")
# Two different Hexagon arch versions named on one line ("built for v73, device is v75"): the binary is for another arch.
_ARCH = re.compile(r"(?<![\w.])[vV](6[5-9]|7\d|8\d)(?![\w.])")
_BUILT_FOR = re.compile(r"(?i)\b(?:compiled|built|generated|created|prepared|exported|targeted|made)\s+(?:\w+\s+){0,3}?for\b[^\n]{0,60}?"
                        r"\b(?:but|while|whereas|however|mismatch\w*|does not match|doesn't match|not match)\b")
_BUILT_FOR_NOUN = re.compile(r"(?i)\b(?:soc\w*|arch\w*|chip\w*|platform|device|target|v\d\d|SM\d{4}|sdk|qairt|qnn|htp|dsp)\b")
_METRIC = re.compile(r"(?i)\b(?P<name>cos(?:ine)?[ _-]?sim(?:ilarity)?|cosine|SQNR|SNR|PSNR|max(?:imum)?[ _-]?abs(?:olute)?[ _-]?(?:diff\w*|err\w*))"
                     r"\b[ \t:=,.()\[\]'\"a-zA-Z/_]{0,64}?(?P<value>-?\d+(?:\.\d+)?(?:e-?\d+)?)")
_IO_NOUN = re.compile(r"(?i)\b(?:inputs?|outputs?|io|graph inputs?|graph outputs?)\b[^\n]{0,40}?\b(?:shapes?|dims?|dimensions?|sizes?"
                      r"|names?|counts?|numbers?|ranks?)\b|\b(?:shapes?|dims?|sizes?|names?|counts?|numbers?|ranks?) of (?:the )?(?:graph )?(?:inputs?|outputs?)\b")
_IO_BAD = re.compile(r"(?i)mismatch\w*|does(?:n't| not) match|\bnot match|\bexpected\b|\bdiffer\w*")
_IO_BINARY = re.compile(r"(?i)\bcontext(?: binary)?\b|\bbinary\b|\bcompiled\b|\boffline\b|\.bin\b|\bserialized\b|\bcached\b")
_ABSENT = re.compile(r"(?i)\b(?:npu|htp|dsp|cdsp|hexagon|accelerator|qnn (?:device|backend))s?\b[^\n]{0,30}?\b(?:(?:is|was|are) )?"
                     r"(?:not (?:be )?(?:detected|found|available|present)|unavailable|missing)\b|\bno (?:npu|htp|dsp|hexagon|qnn device)s?\b"
                     r"[^\n]{0,20}?\b(?:found|detected|available|present)\b")
_VERSION_BAD = re.compile(r"(?i)mismatch|incompatib|does(?:n't| not) match|\bnot match|\bunknown\b|unsupported|too old"
                          r"|\b(?:newer|older|higher|lower)\b[^\n]{0,40}?\bthan\b|(?:\bnot|n't) compatible\b"
                          r"|\bbelow\b|older than|newer than|\bexpected\b")
_PY_IMPORT = re.compile(r"(?:ModuleNotFoundError|ImportError)\b[^\n]*")
_PY_QNN = re.compile(r"(?i)qnn|qualcomm|htp|hexagon|qairt|executorch|\bmnn\b|onnxruntime")
_CRASH = re.compile(r"(?i)segmentation fault|\bsegfault\b|\bsig(?:segv|abrt|bus|ill)\b|core dumped|\btombstone"
                    r"|fatal signal \d+|\bsignal (?:11|6)\b|exit (?:code|status) 13[49]\b|段错误|核心已转储"
                    r"|\baccess violation\b|\b0xc0000005\b|exit (?:code|status) -(?:1073741819|1073740791|11|6)\b"
                    r"|exit status -(?:11|6)\b|Signals\.SIG(?:SEGV|ABRT|BUS|ILL)\b|Fatal Python error: (?:Segmentation|Aborted|Bus)"
                    r"|\b(?:terminated|killed|died|exited|aborted) (?:with|by|on) (?:signal|code|status) (?:-?(?:11|6|7)|SIG\w+)\b")
# Access to the DSP refused, and the nouns that make it the DSP's (not a file's) refusal.
_DENIED = re.compile(r"(?i)permission denied|access (?:is )?denied|not permitted|\bEACCES\b|\bEPERM\b|\bno access\b"
                     r"|avc:\s*denied|权限不足|没有权限|无权限|权限被拒绝?")
# Android denies many apps the reading of vendor properties ("Access denied finding property vendor.fastrpc..."): harmless.
_PROPERTY = re.compile(r"(?i)finding property|\bproperty\b|_prop:s0|\bgetprop\b")
_DSP_NOUN = re.compile(r"(?i)\b(?:c?dsp\w*|adsp\w*|fastrpc\w*|adsprpc|cdsprpc|rpcmem|hexagon|htp|npu|skel|domain \d|device node"
                       r"|DspClient|(?:open_?)?session|HAL)\b|/dev/(?:fastrpc|adsprpc|cdsp|dsp)")


@dataclass(frozen=True)
class StructHit:
    """One structural reading of one log line."""

    rule: str
    category: str
    line: int
    text: str
    why: str
    source: str


@dataclass(frozen=True)
class _Object:
    rule: str
    noun: re.Pattern[str]
    verb: re.Pattern[str]
    category: str


@dataclass(frozen=True)
class Rules:
    """The parsed data file (checked once per process)."""

    raw: dict[str, Any]
    weight: float
    weight_when_worded: float
    structure_only_confidence: float
    max_lines: int
    code_before: re.Pattern[str]
    objects: tuple[_Object, ...]
    unsupported_skip: re.Pattern[str]
    op_names: frozenset[str]
    codes: dict[int, str]

    def why(self, layer: str) -> tuple[str, str]:
        return str(self.raw[layer]["why"]), str(self.raw[layer]["source"])

    def category(self, layer: str, key: str = "category") -> str:
        return str(self.raw[layer][key])


@cache
def rules(path: Path = DATA_FILE) -> Rules:
    raw = json.loads(path.read_text(encoding="utf-8"))
    objects = tuple(_Object(r, re.compile(n), re.compile(v), c) for r, n, v, c in raw["objects"]["rules"])
    codes = {int(k): str(v).split()[0] for k, v in
             json.loads((DATA_DIR / "qnn_error_codes.json").read_text(encoding="utf-8"))["codes"].items()}
    out = Rules(raw=raw, weight=float(raw["weight"]), weight_when_worded=float(raw["weight_when_worded"]), structure_only_confidence=float(raw["structure_only_confidence"]),
                max_lines=int(raw["max_lines_per_anchor"]), code_before=re.compile(raw["codes"]["before"]),
                objects=objects, unsupported_skip=re.compile(raw["unsupported"]["skip"]), op_names=_op_names(),
                codes=codes)
    used = [o.category for o in objects] + list(raw["enum"]["families"].values()) + [c for _r, c in raw["enum"]["reasons"]]
    used += [out.category(k) for k in ("fastrpc", "unsupported", "version", "python_module", "crash", "denied", "capacity",
                                        "metric", "io", "absent")]
    used += list(raw["api"]["calls"].values()) + list(raw["genie"]["reasons"].values())
    used.append(out.category("fastrpc", "mmap_category"))
    bad = {c for c in used if c and c not in CATEGORIES}
    if bad:
        raise ValueError(f"triage_structure.json names unknown categories: {sorted(bad)}")
    return out


def _op_names() -> frozenset[str]:
    """Op names MNN and QNN know (CamelCase words only: 'Conv2d', 'MatMul', 'GridSample', ...)."""
    knowledge = json.loads((DATA_DIR / "qnn_op_knowledge.json").read_text(encoding="utf-8"))
    optypes = json.loads((DATA_DIR / "mnn_optypes.json").read_text(encoding="utf-8"))
    names = set(knowledge["qnn_ops"]) | set(knowledge["onnx_to_mnn"]) | set(optypes["optypes"])
    return frozenset(n for n in names if len(n) > 2 and n[0].isupper())


def enum_category(name: str) -> str:
    """Category of a QNN status enum name ('' when only the sentence around it can tell, e.g. COMMON_ERROR_GENERAL)."""
    m = _ENUM.match(name)
    if m is None:
        return ""
    enum = rules().raw["enum"]
    for reason, category in enum["reasons"]:
        if reason in name:
            return str(category)
    return str(enum["families"].get(m.group("family"), ""))


def code_category(code: int) -> str:
    """Category of a bare QNN status number, through its enum name (its API family)."""
    name = rules().codes.get(code)
    return enum_category(name) if name else ""


def _metric_is_bad(r: Rules, name: str, value: float) -> bool:
    """A metric far outside what a correct fp16/int8 run gives (bounds in the data file); inside them, nothing."""
    spec = r.raw["metric"]
    key = name.lower().replace("_", "").replace("-", "").replace(" ", "")
    if key.startswith("cos"):
        return value < float(spec["cosine_below"])
    if key == "psnr":
        return value < float(spec["psnr_db_below"])
    if key in ("sqnr", "snr"):
        return value < float(spec["sqnr_db_below"])
    return value > float(spec["max_abs_above"])


@dataclass
class StructureScan:
    """Structural hits of one log, fed chunk by chunk (first hit of each rule and category kept)."""

    hits: dict[tuple[str, str], StructHit] = field(default_factory=dict)
    crash: StructHit | None = None
    metric: StructHit | None = None
    context_seen: bool = False

    def feed(self, text: str, base: int) -> None:
        r = rules()
        if not self.context_seen:
            self.context_seen = any(lit in text for lit in r.raw["crash"]["context"])
        starts: set[int] = set()
        for anchor in ANCHORS:
            pos = text.find(anchor)
            n = 0
            while pos >= 0 and n < r.max_lines:
                start = text.rfind("\n", 0, pos) + 1
                starts.add(start)
                n += 1
                end = text.find("\n", pos)
                if end < 0:
                    break
                pos = text.find(anchor, end)
        line_no, prev = base + 1, 0
        for start in sorted(starts):
            line_no += text.count("\n", prev, start)
            prev = start
            end = text.find("\n", start)
            self._line(r, text[start : end if end >= 0 else len(text)], line_no)

    def results(self) -> list[StructHit]:
        out = list(self.hits.values())
        if self.context_seen:
            out.extend(h for h in (self.crash, self.metric) if h is not None)
        return out

    def _add(self, r: Rules, rule: str, category: str, line_no: int, line: str, layer: str) -> None:
        if not category or (rule, category) in self.hits:
            return
        if any(h.category == category and h.line == line_no for h in self.hits.values()):
            return  # one line is one vote for a category, however many rules read it
        why, source = r.why(layer)
        self.hits[(rule, category)] = StructHit(rule, category, line_no, line.strip()[:300], why, source)

    def _line(self, r: Rules, line: str, line_no: int) -> None:
        for m in _ENUM.finditer(line):
            self._add(r, f"enum:{m.group('family')}", enum_category(m.group(0)), line_no, line, "enum")
        for m in _GENIE.finditer(line):
            self._add(r, "genie", r.raw["genie"]["reasons"].get(m.group("reason"), ""), line_no, line, "genie")
        for m in _ENUM_BARE.finditer(line):
            self._add(r, f"enum:{m.group(0).split('_ERROR_')[0]}", enum_category("QNN_" + m.group(0)), line_no, line, "enum")
        for m in _CODE.finditer(line):
            value = int(m.group("hex"), 16) if m.group("hex") else int(m.group("dec"))
            if value in r.codes and r.code_before.search(line[max(0, m.start() - 40) : m.start()]):
                self._add(r, f"code:{value // 1000}", code_category(value), line_no, line, "codes")
        crashed = _CRASH.search(line) is not None
        failing = _FAIL.search(line) is not None and not crashed  # a line that names a crash is read as the crash
        if failing and _SUCCESS.search(line) and not _FAIL_VERB.search(line):
            failing = False  # "before this error, every file loaded successfully": a success, 'error' only as a noun
        if _FASTRPC.search(line) and (failing or "AEE_E" in line or "0x8000" in line):
            key = "mmap_category" if _MMAP.search(line) else "category"
            self._add(r, "fastrpc", r.category("fastrpc", key), line_no, line, "fastrpc")
        capacity = _CAPACITY_NOUN.search(line) is not None and _CAPACITY_BAD.search(line) is not None
        arches = len({m.group(1) for m in _ARCH.finditer(line)}) > 1 and (failing or _VERSION_BAD.search(line) is not None)
        if failing and not capacity:  # "context creation failed: VTCM allocation failed": the memory is what failed
            for obj in r.objects:
                if arches and obj.category == "device_lib_missing_or_load_failure":
                    continue  # "cannot load: looking for v75 libs, v73 installed": another arch, not a missing library
                if obj.noun.search(line) and obj.verb.search(line):
                    self._add(r, f"object:{obj.rule}", obj.category, line_no, line, "objects")
        if _UNSUPPORTED.search(line) and not r.unsupported_skip.search(line) and not _CAN_QUESTION.match(line) and (
                _OP_WORD.search(line) or any(w in r.op_names for w in _CAMEL.findall(line))):
            self._add(r, "unsupported", r.category("unsupported"), line_no, line, "unsupported")
        if _DENIED.search(line) and (_DSP_NOUN.search(line) or _FASTRPC.search(line)) and not _PROPERTY.search(line):
            self._add(r, "denied", r.category("denied"), line_no, line, "denied")
        if arches or (_VERSION_NOUN.search(line) and _VERSION_BAD.search(line)) or (
                _BUILT_FOR.search(line) and _BUILT_FOR_NOUN.search(line)):
            self._add(r, "version", r.category("version"), line_no, line, "version")
        if _ABSENT.search(line):
            self._add(r, "absent", r.category("absent"), line_no, line, "absent")
        if _IO_NOUN.search(line) and _IO_BAD.search(line) and _IO_BINARY.search(line):
            self._add(r, "io", r.category("io"), line_no, line, "io")
        for m in _API_CALL.finditer(line):
            category = r.raw["api"]["calls"].get(m.group("call"), "")
            if category and int(m.group("code"), 0) != 0:
                self._add(r, f"api:{m.group('call')}", category, line_no, line, "api")
        if capacity:
            self._add(r, "capacity", r.category("capacity"), line_no, line, "capacity")
        metric = _METRIC.search(line) if self.metric is None else None
        if metric is not None and _metric_is_bad(r, metric.group("name"), float(metric.group("value"))):
            why, source = r.why("metric")
            self.metric = StructHit("metric", r.category("metric"), line_no, line.strip()[:300], why, source)
        imp = _PY_IMPORT.search(line)
        if imp and _PY_QNN.search(imp.group(0)):
            self._add(r, "python-module", r.category("python_module"), line_no, line, "python_module")
        if crashed and (self.crash is None or line_no > self.crash.line):
            # The last crash line is kept: the crash that stopped the run (a title or the user's words may name it first).
            why, source = r.why("crash")
            self.crash = StructHit("crash", r.category("crash"), line_no, line.strip()[:300], why, source)
