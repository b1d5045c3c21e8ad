"""Heartbeating for long activities, in one place.

While an activity awaits something slow (a model's answer, a job's work, a command), a background
task heartbeats every ``BEAT_SHARE`` (two thirds) of the heartbeat timeout, leaving at least
``SLACK_SECONDS`` (3 s) or a third of the timeout for a late beat, the first time after one such
interval: a call shorter than that sends none (most model answers, every file tool). That is
how a dead worker is noticed after the heartbeat timeout instead of the whole start-to-close
timeout, and how a cancellation reaches the activity at all. Outside an activity (a tool called
directly, as tests do) nothing is sent.

Why two thirds: each beat that reaches the server is a billed Temporal Cloud action, and a beat
that comes too late ends a live attempt. At the default 9 s timeout a beat goes every 6 s (a
10 s model call sends one), and a worker's event loop may stall for 3 s before a live attempt is
taken for lost. A shorter timeout notices a dead worker sooner and costs a beat more often
(docs/reliability.md has the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import activity

MIN_INTERVAL_SECONDS = 0.25
"""Beats never come closer than this (the SDK lets each through:
``treadle.plugin.plugin.HEARTBEAT_THROTTLE``)."""
BEAT_SHARE = 2 / 3
"""Beats come this share of the heartbeat timeout apart, the first one too (the timeout counts
from the attempt's start) ..."""
SLACK_SECONDS = 3.0
"""... but at least this long before the timeout, or a third of it when it is shorter than
9 s: a 2 s timeout (the tests' fast recovery) beats every 0.67 s, as a third always did."""
DEFAULT_INTERVAL_SECONDS = 5.0
"""Used when the activity has no heartbeat timeout (heartbeats then only carry cancellation)."""


@dataclasses.dataclass
class _Beats:
    """One activity attempt's beats: what each must carry first (a sent mark: a heartbeat's
    details replace those before it), and when the last one was handed to the SDK."""

    token: bytes
    carried: list[Any] = dataclasses.field(default_factory=list)
    last: float | None = None


_beats: contextvars.ContextVar[_Beats | None] = contextvars.ContextVar(
    "treadle_heartbeats", default=None
)
"""The attempt's ``_Beats``, shared with the beating task it starts (the task copies the
context, and with it this object), so a mark made after the beats began is carried too."""


def _attempt_beats() -> _Beats:
    token = activity.info().task_token if activity.in_activity() else b""
    beats = _beats.get()
    if beats is None or beats.token != token:
        beats = _Beats(token)
        _beats.set(beats)
    return beats


def last_beat() -> float | None:
    """When (``time.monotonic()``) this attempt last heartbeated, if it did."""
    return _attempt_beats().last


def beat(*details: Any) -> None:
    """One heartbeat of this attempt, carrying what it must, remembered as its last."""
    beats = _attempt_beats()
    activity.heartbeat(*beats.carried, *details)
    beats.last = time.monotonic()


def interval_seconds() -> float:
    """How far apart beats go for the activity's heartbeat timeout (``beat_interval``)."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return DEFAULT_INTERVAL_SECONDS
    return beat_interval(timeout.total_seconds())


def beat_interval(timeout: float) -> float:
    """``BEAT_SHARE`` of ``timeout``, leaving ``SLACK_SECONDS`` (or a third of it) for a late
    beat: 6 s for 9 s, 20 s for 30 s, 0.67 s for 2 s."""
    interval = max(timeout / 3, min(timeout * BEAT_SHARE, timeout - SLACK_SECONDS))
    return max(MIN_INTERVAL_SECONDS, interval)


def carry(*details: Any) -> None:
    """Make every later beat of this activity carry ``details`` first."""
    _attempt_beats().carried[:] = details


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
    _attempt_beats()  # made here, so the beating task shares it

    async def beating() -> None:
        while True:
            await asyncio.sleep(interval)
            beat(*details, *(() if progress is None else (progress(),)))

    task = asyncio.create_task(beating())
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
