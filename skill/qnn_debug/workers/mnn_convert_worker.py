"""Worker: one ONNX → MNN conversion with the MNN wheel's converter (``import _tools`` prints to fd 1).

Request: ``{"src", "dst", "biz_code"?, "flags"?}`` (flags: ``--fp16`` / ``--weightQuantBits N`` only); returns ``{"mnn": dst, "bytes": size}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..progress import Progress


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    from .mnn_worker import convert

    dst = Path(request["dst"])
    flags = [str(f) for f in request.get("flags") or []]
    if any(f not in ("--fp16", "--weightQuantBits") and not f.isdigit() for f in flags):
        raise ValueError(f"converter flags {flags} are not weight-storage flags")
    convert(Path(request["src"]), dst, str(request.get("biz_code") or "MNN"), flags)
    return {"mnn": str(dst), "bytes": dst.stat().st_size}
