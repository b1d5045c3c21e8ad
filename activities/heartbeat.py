"""Heartbeating for long activities, in one place.

While an activity awaits something slow (a model's answer, a job's work, a command), a background
task heartbeats after ``FIRST_BEAT_SECONDS`` (or a third of the heartbeat timeout, if that is
sooner) and then at a third of the heartbeat timeout: a call shorter than that sends none (a
fast model's answer, every file tool), which is time a step does not spend. That is how a dead
worker is noticed after the heartbeat timeout instead of the whole start-to-close timeout, and
how a cancellation reaches the activity at all. Outside an activity (a tool called directly, as
tests do) nothing is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import activity

MIN_INTERVAL_SECONDS = 0.25
"""Beats never come closer than this (the SDK lets each through: ``worker.HEARTBEAT_THROTTLE``)."""
FIRST_BEAT_SECONDS = 1.0
"""The first beat waits this long: the heartbeat timeout counts from the attempt's start, and a
beat earlier than a third of it tells Temporal nothing it needs yet."""
DEFAULT_INTERVAL_SECONDS = 5.0
"""Used when the activity has no heartbeat timeout (heartbeats then only carry cancellation)."""


def interval_seconds() -> float:
    """A third of the activity's heartbeat timeout, so one late beat does not fail the attempt."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return DEFAULT_INTERVAL_SECONDS
    return max(MIN_INTERVAL_SECONDS, timeout.total_seconds() / 3)


@contextlib.asynccontextmanager
async def heartbeating(
    *details: Any, progress: Callable[[], Any] | None = None
) -> AsyncIterator[None]:
    """Heartbeat for as long as the block runs.

    Each beat carries ``details`` and then, when given, ``progress()`` called at that beat (e.g.
    ``"pytest running for 12s"``). A failure of the block wins over a failure of the heartbeats;
    a heartbeat failure is raised only after a block that succeeded.
    """
    if not activity.in_activity():
        yield
        return
    interval = interval_seconds()

    async def beat() -> None:
        await asyncio.sleep(min(interval, FIRST_BEAT_SECONDS))
        while True:
            activity.heartbeat(*details, *(() if progress is None else (progress(),)))
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    except BaseException:
        await _stop(task, quietly=True)
        raise
    await _stop(task)


async def _stop(task: asyncio.Task[None], *, quietly: bool = False) -> None:
    """Cancel the beating task; raise what made it fail unless ``quietly``."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        if not quietly:
            raise
