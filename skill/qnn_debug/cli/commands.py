"""Imports every command module so each registers itself on :data:`app`.

Add one module per command group; keep command logic in the engine, not here.
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registration side effect)
    baseline_cmd,
    compare_cmd,
    demo_cmd,
    diagnose_cmd,
    dump_cmd,
    fix_cmd,
    llm_check_cmd,
    llm_text_cmd,
    localise_cmd,
    mnn_cmds,
    op_cmd,
    triage_cmd,
    version_cmd,
)
