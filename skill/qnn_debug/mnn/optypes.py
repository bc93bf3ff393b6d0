"""MNN OpType numbers ↔ names, and which QNN ops MNN's QNN backend emits for each OpType.

Why a table: MNN logs name ops by number (``MNN_QNN: Not registered type 17, deconv1.``), and
``Not registered`` means "no QNN implementation, this op leaves the NPU". The numbers and the
OpType → QNN op mapping are data (``data/mnn_optypes.json``), taken from alibaba/MNN at the commit
recorded in the file: ``schema/default/MNN.fbs`` (enum ``OpType``) and ``registerQNNOps`` plus the
``mNodeType`` assignments under ``source/backend/qnn/execution``.

Pure stdlib + pydantic; cheap enough for ``triage`` to import.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import BadInputError

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "mnn_optypes.json"


class QnnMapping(BaseModel):
    """One registered QNN creator: the MNN OpType it handles and the QNN op types it may emit."""

    optype: str
    number: int
    creator: str
    file: str
    qnn_ops: list[str]
    notes: str = ""
    condition: str | None = Field(default=None, description="build condition, e.g. a CMake switch")


@cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


@cache
def _by_name() -> dict[str, int]:
    return dict(_data()["optypes"])


@cache
def _by_number() -> dict[int, str]:
    return {v: k for k, v in _by_name().items()}


@cache
def _by_lower() -> dict[str, str]:
    return {k.lower(): k for k in _by_name()}


def source() -> dict[str, str]:
    """Where the number table comes from (repository, commit, file, symbol)."""
    return dict(_data()["source"])


def all_optypes() -> dict[str, int]:
    """Every OpType name with its number, in enum order."""
    return dict(_by_name())


def optype_name(n: int) -> str:
    """Name of OpType number ``n`` (e.g. 17 → ``Deconvolution``); BadInputError if unknown."""
    try:
        return _by_number()[int(n)]
    except (KeyError, ValueError, TypeError):
        raise BadInputError(
            f"{n!r} is not an MNN OpType number",
            hint=f"valid numbers are 0–{max(_by_number())}; see schema/default/MNN.fbs enum OpType",
        ) from None


def optype_number(name: str | int) -> int:
    """Number of an OpType given its name (case-insensitive, optional ``OpType_`` prefix) or number."""
    if isinstance(name, int) or (isinstance(name, str) and name.strip().lstrip("-").isdigit()):
        n = int(name)
        optype_name(n)  # validates
        return n
    key = str(name).strip()
    if key.lower().startswith("optype_"):
        key = key[len("optype_") :]
    canonical = _by_lower().get(key.lower())
    if canonical is None:
        raise BadInputError(f"{name!r} is not an MNN OpType name", hint="see `qnn-debug op --list` or MNN.fbs enum OpType")
    return _by_name()[canonical]


def canonical_optype(name: str | int) -> str:
    """The enum's own spelling for a name or number (``relu6`` → ``ReLU6``, ``17`` → ``Deconvolution``)."""
    return optype_name(optype_number(name))


@cache
def qnn_mappings() -> list[QnnMapping]:
    """Every OpType MNN's QNN backend registers, in registration order."""
    names = _by_name()
    return [QnnMapping(number=names[o["optype"]], **o) for o in _data()["qnn_backend"]["ops"]]


def qnn_mapping(name: str | int) -> QnnMapping | None:
    """The QNN implementation of an OpType, or None when MNN's QNN backend has none (op runs elsewhere)."""
    canonical = canonical_optype(name)
    return next((m for m in qnn_mappings() if m.optype == canonical), None)


def qnn_backend_source() -> dict[str, str]:
    return dict(_data()["qnn_backend"]["source"])


def optypes_emitting(qnn_op: str) -> list[QnnMapping]:
    """Which MNN OpTypes may emit a given QNN op type (case-insensitive), e.g. ``Conv2d`` → Convolution."""
    key = qnn_op.lower()
    return [m for m in qnn_mappings() if key in (q.lower() for q in m.qnn_ops)]
