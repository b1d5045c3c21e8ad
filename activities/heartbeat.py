"""Heartbeating for long activities, in one place.

While an activity awaits something slow (a model's answer, a job's work), a background task
heartbeats at a third of the heartbeat timeout. That is how a dead worker is noticed after the
heartbeat timeout instead of the whole start-to-close timeout, and how a cancellation reaches
the activity at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from temporalio import activity

MIN_INTERVAL_SECONDS = 0.5
DEFAULT_INTERVAL_SECONDS = 5.0
"""Used when the activity has no heartbeat timeout (heartbeats then only carry cancellation)."""


@contextlib.asynccontextmanager
async def heartbeating(*details: Any) -> AsyncIterator[None]:
    """Heartbeat with ``details`` for as long as the block runs."""
    timeout = activity.info().heartbeat_timeout
    interval = (
        max(MIN_INTERVAL_SECONDS, timeout.total_seconds() / 3)
        if timeout
        else DEFAULT_INTERVAL_SECONDS
    )

    async def beat() -> None:
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
