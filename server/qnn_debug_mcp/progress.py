"""Forward engine progress events to an MCP client as ``notifications/progress``.

MCP progress is one number that must grow with every notification, while the engine reports stages
(``stage``, ``done``/``total``). We send a running count as ``progress`` and put the stage and its
own fraction into ``message``; per-tensor updates are thinned so a 2,000-tensor dump does not flood
the client, but every stage start and end is sent.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from qnn_debug.progress import ProgressEvent

SendProgress = Callable[[float, float | None, str | None], Awaitable[None]]
MIN_INTERVAL_S = 0.25


def describe(event: ProgressEvent) -> str:
    """One human line for an event, e.g. ``ort-cpu: save (3/5)`` or ``ort-cpu: save: done``."""
    label = event.stage if event.message in ("", event.stage) else f"{event.stage}: {event.message}"
    if event.finished:
        return f"{event.stage}: done"
    if event.total:
        return f"{label} ({event.done:g}/{event.total:g})"
    return label


class ProgressRelay:
    """Callable sink: ``await relay(event)`` forwards it (thinned) to ``send``."""

    def __init__(self, send: SendProgress, *, min_interval_s: float = MIN_INTERVAL_S):
        self._send = send
        self._min_interval = min_interval_s
        self._count = 0
        self._last = 0.0

    async def __call__(self, event: ProgressEvent) -> None:
        now = time.monotonic()
        boundary = event.finished or (event.done == 0)
        if not boundary and now - self._last < self._min_interval:
            return
        self._last = now
        self._count += 1
        await self._send(float(self._count), None, describe(event))
