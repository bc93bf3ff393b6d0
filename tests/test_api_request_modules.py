"""The request models live in small modules by job, and the public import path still gives every one of them."""

from __future__ import annotations

from pathlib import Path

import qnn_debug.api as api
import qnn_debug.api.requests as requests

API = Path(api.__file__).resolve().parent


def test_every_api_module_stays_under_600_lines() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in API.glob("*.py")}
    assert all(n < 600 for n in sizes.values()), sizes


def test_every_operation_request_is_importable_from_qnn_debug_api_requests() -> None:
    ops = api.all_operations()
    assert len(ops) >= 15
    for op in ops:
        assert getattr(requests, op.request.__name__) is op.request, op.name
    assert set(requests.__all__) >= {op.request.__name__ for op in ops}
    # the field types and helpers other code imports from here
    for name in ("Request", "TargetRun", "MAX_LOG_CHARS", "bool_word", "parse_attr_pairs", "parse_range_args"):
        assert hasattr(requests, name), name
