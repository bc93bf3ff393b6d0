"""Server settings fixed at start-up (command-line flags), shared by every tool.

Kept free of MCP imports so the engine-facing helpers and the tests can build one cheaply.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class ServerConfig(BaseModel):
    """What the operator decided when starting ``qnn-debug-mcp``; tools never change it."""

    model_config = ConfigDict(frozen=True)

    roots: list[Path] = Field(
        default_factory=lambda: [Path.cwd()],
        description="Workspace roots used when the client offers none; file arguments must stay inside them.",
    )
    exec_roots: list[Path] = Field(
        default_factory=list,
        description="Folders the executables and native libraries named in target options (mnn2qnn, mnn_build_dir, "
        "qnn_sdk, qnn_lib_dir) must come from; empty = the --root folders (stdio) or none at all (HTTP).",
    )
    http: bool = Field(default=False, description="Serving streamable HTTP (several clients may connect).")
    python: str = Field(default=sys.executable, description="Interpreter that runs the engine workers.")
    adb: str | None = Field(default=None, description="adb executable passed to the engine; None = engine default.")
    background_wait_s: float = Field(
        default=20.0,
        ge=0,
        description="Automatic jobs (baseline, dump_qnn, diagnose) wait this long for a result before "
        "returning only the job id, so small models still answer in one call.",
    )
    quick_timeout_s: float = Field(default=60.0, gt=0, description="Per-call limit of a quick tool (triage, op lookup, "
                                   "toggle, adb queries; some allow a small multiple): its child is killed after it.")
    stall_timeout_s: float = Field(default=600.0, gt=0, description="An engine run (inline or job) that uses no CPU and "
                                   "prints nothing for this long is blocked on I/O and is stopped, well before "
                                   "long_timeout_s.")
    device_timeout_s: float = Field(default=30.0, gt=0, description="Limit for one adb query (list/probe).")
    long_timeout_s: float = Field(default=3600.0, gt=0, description="Limit for one long engine run (a child process).")
    max_running_jobs: int = Field(default=2, ge=1, description="Jobs beyond this wait in state 'queued'.")
