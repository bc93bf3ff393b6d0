"""Imports every command module so each registers itself on :data:`app`.

Add one import per command module; keep command logic in the engine, not here.
"""

from __future__ import annotations

from . import version_cmd  # noqa: F401
