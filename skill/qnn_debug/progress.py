"""Progress reporting that the CLI renders as bars and the MCP server forwards as notifications.

Engine code calls ``with progress.stage("name", total=n) as advance: advance()``; it never knows
who is listening. The sink receives :class:`ProgressEvent` objects.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TextIO


@dataclass(frozen=True)
class ProgressEvent:
    stage: str
    done: float
    total: float | None
    message: str
    finished: bool = False


ProgressSink = Callable[[ProgressEvent], None]


class Progress:
    """Dispatches stage progress to a sink; the null sink makes it free to call everywhere."""

    def __init__(self, sink: ProgressSink | None = None):
        self._sink = sink

    def emit(self, event: ProgressEvent) -> None:
        if self._sink is not None:
            self._sink(event)

    def note(self, stage: str, message: str = "") -> None:
        self.emit(ProgressEvent(stage, 0, None, message or stage))

    @contextmanager
    def stage(self, name: str, total: float | None = None, message: str = "") -> Iterator[Callable[..., None]]:
        state = {"done": 0.0}
        self.emit(ProgressEvent(name, 0, total, message or name))

        def advance(step: float = 1, message: str = "") -> None:
            state["done"] += step
            self.emit(ProgressEvent(name, state["done"], total, message or name))

        yield advance
        self.emit(ProgressEvent(name, total if total is not None else state["done"], total, message or name, True))


NULL_PROGRESS = Progress()


def json_lines_sink(stream: TextIO = sys.stderr) -> ProgressSink:
    """A sink printing one JSON object per event, prefixed so a parent process can pick them out."""

    def sink(event: ProgressEvent) -> None:
        stream.write(PROGRESS_PREFIX + json.dumps(asdict(event)) + "\n")
        stream.flush()

    return sink


PROGRESS_PREFIX = "@@qnn-debug-progress "


def eta(what: str, done: int, total: int, started: float) -> str:
    """``what`` (done/total), elapsed and estimated remaining time: the progress line at LLM size."""
    import time

    spent = time.monotonic() - started
    left = spent / done * (total - done) if done else 0.0
    return f"{what} ({done}/{total}), {spent:.0f} s elapsed, ~{left:.0f} s left"
