"""Imports every command module so each registers itself on :data:`app`.

Add one import per command module; keep command logic in the engine, not here.
"""

from __future__ import annotations

from . import version_cmd  # noqa: F401
from . import baseline_cmd, demo_cmd, dump_cmd  # noqa: F401
from . import triage_cmd  # noqa: F401
from . import op_cmd  # noqa: F401
from . import mnn_cmds  # noqa: F401
from . import compare_cmd, diagnose_cmd  # noqa: F401
