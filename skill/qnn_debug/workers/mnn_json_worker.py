"""Worker: an .mnn to MNN's JSON form and back, with the MNN wheel's converter (``import _tools`` prints to fd 1).

Request: ``{"mode": "to_json" | "from_json", "src", "dst"}``; returns ``{"out": dst, "bytes": size}``. The JSON
keeps external-weight offsets but prints floats with six decimals, so it serves to compare models, not to edit them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TargetError
from ..progress import Progress


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import _tools

    src, dst = Path(request["src"]), Path(request["dst"])
    dst.unlink(missing_ok=True)
    if request["mode"] == "to_json":
        args = ["-f", "MNN", "--modelFile", str(src), "--JsonFile", str(dst)]
    else:
        args = ["-f", "JSON", "--modelFile", str(src), "--MNNModel", str(dst), "--bizCode", "MNN"]
    ok = _tools.mnnconvert(["mnnconvert", *args])
    if not ok or not dst.exists() or dst.stat().st_size == 0:
        raise TargetError(f"MNN's converter could not turn {src.name} into {dst.name}",
                          hint="see the worker log for the converter's messages")
    return {"out": str(dst), "bytes": dst.stat().st_size}
