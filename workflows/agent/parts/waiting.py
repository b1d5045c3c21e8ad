"""The ``wait`` tool: a run parked on a durable Temporal timer (``Waiting``), as pure functions.

Acting opens the wait (``open_wait``), the engine's Waiting handler sleeps with
``workflow.wait_condition(..., timeout=...)`` - one timer in history, no activity, no worker
busy - and the call's observation says how it ended (``observation``): on time, or early
because a user message, guidance or a ``wake`` signal arrived (``wake``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import Field, ValidationError

from treadle.workflows.agent.messages.catalogue import WaitArgs
from treadle.workflows.agent.messages.models import GuideSignal, ToolCall
from treadle.workflows.base import Frozen, Mutable, describe_errors

WAIT = "wait"
"""The tool's name."""


class WakeSignal(Frozen):
    """The ``wake`` signal's body: ``{"reason": "..."}`` (optional)."""

    reason: str = Field("", max_length=2_000)


class WakeRefused(ValueError):
    """A ``wake`` or ``guide`` body a waiting run cannot take (a trace line, never a failure)."""


class WaitState(Mutable):
    """A ``wait`` call in progress: when it began, when it wakes, and what woke it early."""

    call_id: str | None = None
    reason: str = ""
    started_at: datetime | None = None
    wakes_at: datetime | None = None
    clipped: bool = False
    """The model asked for longer than ``max_wait_seconds``: the wait was shortened to it."""
    woken_by: str | None = None
    """Why the wait ended early, once something ended it."""
    parallel: bool = False
    """The wait was opened in ParallelActing: the step's other calls go on concurrently."""
    result: str | None = None
    """The call's observation, once the wait ended; Acting adds it to the step's."""

    @property
    def active(self) -> bool:
        return self.call_id is not None


def open_wait(
    call: ToolCall, args: WaitArgs, now: datetime, max_seconds: float, *, parallel: bool
) -> WaitState | str:
    """The wait a ``wait`` call opens, or the call's observation when there is nothing to wait
    for (a time that has passed)."""
    if args.until is not None:
        until = args.until if args.until.tzinfo else args.until.replace(tzinfo=UTC)
        seconds = (until - now).total_seconds()
        if seconds <= 0:
            return f"nothing to wait for: {until.isoformat()} has passed (now {now.isoformat()})"
    else:
        seconds = args.seconds or 0.0
    clipped = seconds > max_seconds
    seconds = min(seconds, max_seconds)
    return WaitState(
        call_id=call.id,
        reason=args.reason,
        started_at=now,
        wakes_at=now + timedelta(seconds=seconds),
        clipped=clipped,
        parallel=parallel,
    )


def wake(wait: WaitState, why: str) -> bool:
    """End the wait early (the first reason counts); ``False`` when no wait is open."""
    if not wait.active or wait.woken_by is not None:
        return False
    wait.woken_by = why
    return True


def wake_reason(bodies: tuple[Any, ...]) -> str:
    """Why a ``wake`` signal ends the wait, from its body (none, or ``{"reason": "..."}``)."""
    signal = _one(WakeSignal, "wake", bodies)
    return f"woken by a wake signal: {signal.reason}" if signal.reason else "woken by a wake signal"


def guidance(bodies: tuple[Any, ...]) -> str:
    """A ``guide`` signal to a waiting run: its guidance ends the wait, and the model reads it."""
    signal = _one(GuideSignal, "guide", bodies)
    if signal.guidance is None:
        raise WakeRefused("the run is waiting (wait tool): send guidance to wake it, or cancel it")
    return f"guidance from a human: {signal.guidance}"


_M = TypeVar("_M", bound=Frozen)


def _one(schema: type[_M], name: str, bodies: tuple[Any, ...]) -> _M:
    if len(bodies) > 1:
        raise WakeRefused(f"{name} takes one JSON body; got {len(bodies)}")
    try:
        return schema.model_validate(bodies[0] if bodies and bodies[0] is not None else {})
    except ValidationError as exc:
        raise WakeRefused(describe_errors(exc)) from None


def remaining_seconds(wait: WaitState, now: datetime) -> float:
    if wait.wakes_at is None:
        return 0.0
    return max((wait.wakes_at - now).total_seconds(), 0.0)


def observation(wait: WaitState, now: datetime, max_seconds: float) -> str:
    """What the model sees as the ``wait`` call's result."""
    waited = (now - (wait.started_at or now)).total_seconds()
    if wait.woken_by is not None:
        text = f"waited {waited:.0f}s: woke early: {wait.woken_by}"
    else:
        text = f"waited {waited:.0f}s: woke on time"
    if wait.clipped:
        text += f" (the wait was shortened to the run's maximum of {max_seconds:g}s)"
    return text


def describe(wait: WaitState) -> str:
    """One line for the trace and the Web UI: until when, and why."""
    until = wait.wakes_at.isoformat() if wait.wakes_at else "?"
    return f"until {until}: {wait.reason}"
