"""``qnn-debug version``: tool and library versions (also recorded in every run.json)."""

from __future__ import annotations

from ..versions import library_versions
from .app import app
from .common import JSON_OPTION, emit


@app.command("version")
def version(json_out: bool = JSON_OPTION) -> None:
    """Print the versions of qnn-debug and the libraries it drives."""
    emit(library_versions(), json_out)
