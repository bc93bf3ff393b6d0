"""Versions of the tool and its libraries, read from package metadata (no heavy imports)."""

from __future__ import annotations

import platform
from importlib import metadata

from . import __version__

_PACKAGES = ("onnx", "onnxruntime", "onnxruntime-qnn", "MNN", "numpy", "mcp")


def library_versions() -> dict[str, str]:
    out = {"qnn-debug": __version__, "python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out
