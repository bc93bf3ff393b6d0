"""Which graph of a VL export folder a command means: ``visual.onnx`` (the vision encoder) or ``llm.onnx``.

llmexport keeps the ONNX graphs under ``onnx/`` of the export folder (``--export onnx`` writes them at the top);
a folder holding both graphs is a vision-language export, whose vision encoder is looked at by default (an
image-path bug shows there; a text-only prompt that is already wrong points at ``llm.onnx``: ``--graph llm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from .. import fs
from ..errors import BadInputError

Graph = Literal["visual", "llm"]


def graph_in_folder(path: Path, graph: Graph | None) -> Path:
    """``path`` itself when it is a model file; for a folder, its ``onnx/<graph>.onnx`` (or ``<graph>.onnx``)."""
    p = fs.check(path, what="model", must_exist=True)
    if not p.is_dir():
        if graph is not None:
            raise BadInputError(f"--graph {graph} applies to an export folder, not to the file {p.name}",
                                hint=f"drop --graph, or give the folder that holds {graph}.onnx")
        return path
    want = graph or "visual"
    for candidate in (p / "onnx" / f"{want}.onnx", p / f"{want}.onnx"):
        if candidate.is_file():
            return candidate
    has = sorted(str(c.relative_to(p)) for c in [*p.glob("*.onnx"), *p.glob("onnx/*.onnx")])
    raise BadInputError(f"{p} holds no {want}.onnx (looked in onnx/ and at the top)"
                        + (f"; it has {', '.join(has)}" if has else ""),
                        hint="export the ONNX graphs with llmexport.py (they are kept under onnx/), or pass the "
                             ".onnx file itself" + ("" if graph else "; for the decoder add --graph llm"))
