"""What every tool call can reach: the start-up config, the job manager and the report registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .config import ServerConfig
from .jobs import JobManager
from .reports import ReportRegistry


@dataclass
class AppState:
    """Lifespan state: one per server process (stdio, HTTP) or per in-process test connection."""

    config: ServerConfig
    jobs: JobManager
    reports: ReportRegistry
    claimed_outputs: set[Path] = field(default_factory=set)  # run directories handed out (see outputs.py)
