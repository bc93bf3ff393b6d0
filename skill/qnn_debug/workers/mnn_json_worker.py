"""Worker: an .mnn to MNN's JSON form, with the MNN wheel's converter (``import _tools`` prints to fd 1).

Request: ``{"src", "dst"}``; returns ``{"out": dst, "bytes": size}``. The JSON keeps external-weight offsets but
prints floats with six decimals, so it serves to compare two models as MNN reads them, not to edit one.
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
    ok = _tools.mnnconvert(["mnnconvert", "-f", "MNN", "--modelFile", str(src), "--JsonFile", str(dst)])
    if not ok or not dst.exists() or dst.stat().st_size == 0:
        raise TargetError(f"MNN's converter could not turn {src.name} into {dst.name}",
                          hint="see the worker log for the converter's messages")
    return {"out": str(dst), "bytes": dst.stat().st_size}
