"""QNN error numbers → names, from ``data/qnn_error_codes.json`` (Qualcomm's QNN headers)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "qnn_error_codes.json"


@cache
def _codes() -> dict[int, str]:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return {int(k): str(v) for k, v in data["codes"].items()}


def code_name(code: int) -> str:
    """Name of a QNN error number (mask a raw 64-bit handle with ``& 0xFFFF`` first)."""
    return _codes().get(code, f"unknown QNN error (range {code // 1000 * 1000}s)")
